package queue_test

import (
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// The unfit note names what is requested (only the parts requested) and
// the largest offer, each part of which may come from another node; a
// request that fits has none.
func TestUnfitReason(t *testing.T) {
	t.Parallel()
	largest := queue.Largest(queue.Resources{MemoryMB: 31000, CPUs: 2}, queue.Resources{MemoryMB: 1000, CPUs: 8})
	for _, c := range []struct {
		req  queue.Resources
		want string
	}{
		{queue.Resources{MemoryMB: 64000, CPUs: 2}, "requests 64000 MiB, 2 cpus; the largest live den node offers 31000 MiB, 8 cpus"},
		{queue.Resources{CPUs: 16}, "requests 16 cpus; the largest live den node offers 31000 MiB, 8 cpus"},
		{queue.Resources{MemoryMB: 31000, CPUs: 8}, ""},
		{queue.Resources{}, ""},
	} {
		if got := queue.UnfitReason(c.req, largest); got != c.want {
			t.Errorf("UnfitReason(%v) = %q, want %q", c.req, got, c.want)
		}
	}
}

// A claim with free resources takes a task whose own request is a number
// that fits, or that has none; a request of another type (a string, a
// boolean, a document) waits, as an odd start_after does, until the sweep
// has rewritten it as the number it means or failed the task: it is never
// taken as if it fitted.
func TestClaimTakesOnlyRequestsItCanCompare(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	task := func(req any) bson.ObjectID {
		id := bson.NewObjectID()
		d := bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}}
		if req != nil {
			d = append(d, bson.E{Key: "requested_resources", Value: req})
		}
		dentest.Insert(t, db.Collection("tasks"), d)
		return id
	}
	fits := []bson.ObjectID{task(nil), task(bson.D{{Key: "memory_mb", Value: 500}}), task(bson.D{{Key: "cpus", Value: 2.0}, {Key: "memory_mb", Value: nil}})}
	waits := []bson.ObjectID{
		task(bson.D{{Key: "memory_mb", Value: "5000"}}), task(bson.D{{Key: "memory_mb", Value: "500"}}),
		task(bson.D{{Key: "cpus", Value: true}}), task(bson.D{{Key: "memory_mb", Value: bson.D{{Key: "x", Value: 1}}}}),
		task(bson.D{{Key: "memory_mb", Value: 5000}}),
	}
	free := queue.Resources{MemoryMB: 1000, CPUs: 4}
	var got []bson.ObjectID
	for {
		c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: "n", At: time.Now(), Free: &free})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, c.ID)
	}
	if !slices.Equal(got, fits) {
		t.Errorf("claimed %v, want %v (and none of %v)", got, fits, waits)
	}
}

// A queued task's request that is not a number is the sweep's: a number
// written as a string is irregular and rewritten (Normalize), anything
// else (a word, a boolean, a document) is irregular and malformed, and the
// sweep fails the task with the reason, since no claim takes it
// (TestClaimTakesOnlyRequestsItCanCompare).
func TestSweepFindsRequestsThatAreNotNumbers(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	ids := map[string]bson.ObjectID{}
	for name, req := range map[string]any{
		"number": bson.D{{Key: "memory_mb", Value: 500}}, "string number": bson.D{{Key: "memory_mb", Value: "500"}},
		"word": bson.D{{Key: "memory_mb", Value: "lots"}}, "boolean": bson.D{{Key: "cpus", Value: true}},
		"document": bson.D{{Key: "cpus", Value: bson.D{{Key: "n", Value: 1}}}}, "null": bson.D{{Key: "cpus", Value: nil}},
	} {
		ids[name] = bson.NewObjectID()
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[name]}, {Key: "queue", Value: qid}, {Key: "status", Value: -2},
			{Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}, {Key: "requested_resources", Value: req}})
	}
	found := map[bson.ObjectID]queue.Task{}
	tasks, err := store.Irregular(ctx, []bson.ObjectID{qid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if task.IsIrregular() {
			found[task.ID] = task
		}
	}
	for name, want := range map[string]struct{ irregular, malformed bool }{
		"number": {false, false}, "null": {false, false}, "string number": {true, false},
		"word": {true, true}, "boolean": {true, true}, "document": {true, true},
	} {
		task, irregular := found[ids[name]]
		if irregular != want.irregular || (len(task.Malformed()) > 0) != want.malformed {
			t.Errorf("request %s: irregular %v, malformed %v; want %v, %v", name, irregular, task.Malformed(), want.irregular, want.malformed)
		}
	}
}
