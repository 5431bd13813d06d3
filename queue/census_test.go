package queue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// The census counts every queue's tasks by status, a queue whose document
// is gone included, keeps the last failed or orphaned tasks (the newest
// first), and a later census forgets a queue whose tasks are all gone.
func TestCensusCounts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	a := dentest.Queue(t, db, "a", "P", 1, "fifo")
	b := dentest.Queue(t, db, "b", "P", 1, "fifo")
	gone := bson.NewObjectID() // tasks of a queue deleted since
	ids := dentest.Tasks(t, db, a, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	dentest.Tasks(t, db, b, bson.D{})
	bDone := dentest.Tasks(t, db, b, bson.D{})[0]
	orphan := dentest.Tasks(t, db, gone, bson.D{})[0]
	set := func(id bson.ObjectID, status int) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: status}}}})
	}
	set(ids[0], 1)
	set(ids[1], 2)
	set(ids[2], -6)
	set(orphan, 2)
	set(bDone, 1)
	c, err := store.MakeCensus(ctx, "test", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[bson.ObjectID]map[int]int64{a: {1: 1, 2: 1, -6: 1, -2: 1}, b: {-2: 1, 1: 1}, gone: {2: 1}}
	read, err := store.ReadCensus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []*queue.Census{c, read} {
		if len(got.Queues) != len(want) {
			t.Errorf("census of %d queues, want %d: %v", len(got.Queues), len(want), got.Queues)
		}
		for q, byStatus := range want {
			for st, n := range byStatus {
				if got.Queues[q].ByStatus[st] != n {
					t.Errorf("queue %s status %d: %d, want %d", q.Hex(), st, got.Queues[q].ByStatus[st], n)
				}
			}
		}
		if len(got.Failures) != 3 || got.Failures[0] != orphan || got.Failures[1] != ids[2] || got.Failures[2] != ids[1] {
			t.Errorf("failures %v, want %v, %v, %v", got.Failures, orphan, ids[2], ids[1])
		}
	}
	if read.At.IsZero() || read.By != "test" || !read.At.Equal(c.At.Truncate(time.Millisecond)) {
		t.Errorf("census made at %v by %q, read as at %v", c.At, read.By, read.At)
	}
	dentest.Delete(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: gone}})
	if _, err := store.MakeCensus(ctx, "test", time.Now); err != nil {
		t.Fatal(err)
	}
	read, err = store.ReadCensus(ctx, gone, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := read.Queues[gone]; ok || len(read.Queues) != 1 || read.Queues[b].Total() != 2 {
		t.Errorf("after the gone queue's tasks were removed, the census of it and b: %v", read.Queues)
	}
}

// A census young enough is read, not made again; an older one is made
// again; and of many viewers (each its own process's CensusTaker) that
// find it old at once, one counts and the others take its census.
func TestCensusTakenOnceForEveryViewer(t *testing.T) {
	t.Parallel()
	// Counts the census's counts (an aggregate of tasks grouping them by
	// status).
	p, counts := dentest.CountCommands(t, "aggregate", "tasks", "$status")
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	q := dentest.Queue(t, direct, "q", "P", 1, "fifo")
	dentest.Tasks(t, direct, q, bson.D{}, bson.D{})
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	ct := &queue.CensusTaker{Store: store, By: "one"}
	first, err := ct.Take(ctx, time.Minute)
	if err != nil || first.Queues[q].Total() != 2 || counts.Load() != 1 {
		t.Fatalf("first census: %v, %v, after %d counts", first, err, counts.Load())
	}
	again, err := ct.Take(ctx, time.Minute)
	if err != nil || !again.At.Equal(first.At.Truncate(time.Millisecond)) || counts.Load() != 1 {
		t.Errorf("a census a minute may be old was made again: at %v, then %v, %d counts", first.At, again.At, counts.Load())
	}
	dentest.Tasks(t, direct, q, bson.D{})
	// The viewers come a second later, by their clock: the census is
	// older than the 10 ms they ask.
	later := func() time.Time { return time.Now().Add(time.Second) }
	counts.Store(0)
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			viewer := &queue.CensusTaker{Store: store, By: "viewer " + string(rune('a'+i)), Now: later}
			c, err := viewer.Take(ctx, 10*time.Millisecond)
			if err != nil || c.Queues[q].Total() != 3 {
				wrong.Add(1)
			}
		}()
	}
	wg.Wait()
	if wrong.Load() > 0 {
		t.Errorf("%d of 8 viewers did not see the 3 tasks", wrong.Load())
	}
	if n := counts.Load(); n > 2 {
		t.Errorf("8 viewers at once counted %d times; want once (twice if one came after the first count)", n)
	}
	t.Logf("8 viewers: %d counts", counts.Load())
}

// A viewer whose count cannot be made (its context ends first) gets the
// census as it was, however old, with its time.
func TestCensusOldWhenCountingFails(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	q := dentest.Queue(t, db, "q", "P", 1, "fifo")
	dentest.Tasks(t, db, q, bson.D{})
	ct := &queue.CensusTaker{Store: store, By: "test"}
	first, err := ct.Take(dentest.Context(t), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(dentest.Context(t))
	calls := 0
	ct.Now = func() time.Time { // the count's context ends as it starts (the second look at the clock)
		if calls++; calls == 2 {
			cancel()
		}
		return time.Now()
	}
	got, err := ct.Take(ctx, 0)
	if err != nil || got.At.IsZero() || !got.At.Equal(first.At.Truncate(time.Millisecond)) || got.Queues[q].Total() != 1 {
		t.Errorf("with counting cut short: %+v, %v; want the census of %v", got, err, first.At)
	}
}
