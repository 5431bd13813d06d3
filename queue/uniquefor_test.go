package queue_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// insertHeld inserts one task with key k held for hold after it ends.
func insertHeld(t *testing.T, s queue.OperatorStore, qid bson.ObjectID, key string, hold time.Duration, now time.Time) (bson.ObjectID, error) {
	t.Helper()
	ids, err := s.InsertTasks(dentest.Context(t), qid, []bson.Raw{bson.Raw(bsonDoc(t, bson.D{{Key: "n", Value: 7}}))}, now,
		queue.InsertOptions{UniqueKey: key, UniqueFor: hold})
	if err != nil {
		return bson.ObjectID{}, err
	}
	return ids[0], nil
}

// heldUntil fails the test unless err refuses key for an ended holder
// that holds it until a time.
func heldUntil(t *testing.T, err error, holder bson.ObjectID) {
	t.Helper()
	var h *queue.KeyHeldError
	if !errors.As(err, &h) || h.Holder != holder || !queue.Ended(h.Status) || h.Until.IsZero() || !strings.Contains(h.Error(), "until") {
		t.Fatalf("error %v, want the key held until a time by the ended task %s", err, holder.Hex())
	}
}

// A key inserted with a hold stays held after its task ended, until the
// end plus the hold: a den run's result writes when (unique_until), a task
// that ended otherwise gets its mtime plus the hold; the index refuses a
// twin meanwhile, eight racing adds included, and once the time has passed
// exactly one of eight racing adds goes in. A retry forgets the old end.
func TestUniqueForHoldsTheKeyAfterTheEnd(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	now := time.Now()

	first, err := insertHeld(t, store, qid, "k", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if doc := dentest.Task(t, db, first); doc.Lookup("unique_for").Double() != 3600 {
		t.Fatalf("task %v: want unique_for 3600", doc)
	}
	_, err = insertHeld(t, store, qid, "k", time.Hour, now)
	held(t, err, "k", first, queue.StatusQueued)

	// A den run ends it: the key stays, unique_until is the end plus 1h.
	dentest.Claim(t, db, first, "n")
	run := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Host: "h"}
	task, ok, err := store.Start(ctx, first, "n", run, now)
	if err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}
	if hold := queue.KeyHold(task); hold != time.Hour {
		t.Fatalf("KeyHold %v, want 1h", hold)
	}
	if ok, err := store.Finish(ctx, first, "n", run.Token, queue.Result{Status: 1, KeyHold: queue.KeyHold(task)}, now); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	doc := dentest.Task(t, db, first)
	if doc.Lookup("unique_key").StringValue() != "k" || !doc.Lookup("unique_until").Time().Equal(now.Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("finished task %v: want unique_key kept and unique_until 1h after its end", doc)
	}
	keys := queue.NewStore(db)
	if n, err := keys.FreeEnded(ctx, bson.ObjectID{}, "", now.Add(59*time.Minute)); err != nil || n != 0 {
		t.Fatalf("the sweep within the hold freed %d (%v), want 0", n, err)
	}
	_, err = insertHeld(t, store, qid, "k", time.Hour, now.Add(59*time.Minute))
	heldUntil(t, err, first)
	_, err = db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "unique_key", Value: "k"}})
	if !queue.IsDuplicateKey(err) {
		t.Fatalf("a user's insert within the hold: %v, want a duplicate-key error", err)
	}
	// Past the hold: eight racing adds, one goes in.
	second := race(t, store, qid, now.Add(61*time.Minute), 1)

	// Someone else ends it (a cancel, a Perl node): held until its mtime
	// plus the hold, eight racing adds refused meanwhile.
	end := now.Add(2 * time.Hour)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: second}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -5}, {Key: "mtime", Value: end}}}})
	race(t, store, qid, end.Add(30*time.Minute), 0)
	if doc := dentest.Task(t, db, second); !doc.Lookup("unique_until").Time().Equal(end.Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("cancelled task %v: want unique_until its mtime plus 1h", doc)
	}
	// A retry takes the task back with its key and forgets its end.
	secondTask, err := store.Task(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.RetryEnded(ctx, *secondTask, end); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	if doc := dentest.Task(t, db, second); doc.Lookup("unique_until").Type != 0 || doc.Lookup("unique_key").StringValue() != "k" {
		t.Fatalf("retried task %v: want its key and no unique_until", doc)
	}
	// The sweep frees it once the hold has passed.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: second}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}, {Key: "mtime", Value: end}}}})
	if n, err := keys.FreeEnded(ctx, bson.ObjectID{}, "", end.Add(59*time.Minute)); err != nil || n != 0 {
		t.Fatalf("the sweep within the hold freed %d (%v), want 0", n, err)
	}
	if n, err := keys.FreeEnded(ctx, bson.ObjectID{}, "", end.Add(61*time.Minute)); err != nil || n != 1 {
		t.Fatalf("the sweep past the hold freed %d (%v), want 1", n, err)
	}
}

// race runs eight adds of key k at once at time at, and checks that want
// of them went in (the others refused for the key); it returns the one
// that went in.
func race(t *testing.T, s queue.OperatorStore, qid bson.ObjectID, at time.Time, want int) bson.ObjectID {
	t.Helper()
	var mu sync.Mutex
	var in []bson.ObjectID
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := insertHeld(t, s, qid, "k", time.Hour, at)
			var h *queue.KeyHeldError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				in = append(in, id)
			case !errors.As(err, &h):
				t.Errorf("add: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(in) != want {
		t.Fatalf("%d of 8 racing adds went in, want %d", len(in), want)
	}
	if want == 0 {
		return bson.ObjectID{}
	}
	return in[0]
}

// The key made of a task's parameters: the same for the same parameters
// in any order of keys, with a number of any type, and another for other
// values, types or queues.
func TestParamsKey(t *testing.T) {
	t.Parallel()
	q1, q2 := bson.NewObjectID(), bson.NewObjectID()
	key := func(q bson.ObjectID, d bson.D) string {
		k, err := queue.ParamsKey(q, bson.Raw(bsonDoc(t, d)))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := key(q1, bson.D{{Key: "n", Value: int32(7)}, {Key: "s", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: bson.A{"a", 2.5}}}}})
	if !strings.HasPrefix(a, "sha256:") || len(a) != 71 {
		t.Fatalf("key %q: want sha256: and 64 hex digits", a)
	}
	for _, same := range []bson.D{
		{{Key: "s", Value: bson.D{{Key: "y", Value: bson.A{"a", 2.5}}, {Key: "x", Value: int64(1)}}}, {Key: "n", Value: 7.0}},
	} {
		if k := key(q1, same); k != a {
			t.Errorf("%v: key %s, want %s", same, k, a)
		}
	}
	for _, other := range []bson.D{
		{{Key: "n", Value: "7"}, {Key: "s", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: bson.A{"a", 2.5}}}}},
		{{Key: "n", Value: int32(7)}, {Key: "s", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: bson.A{2.5, "a"}}}}},
		{{Key: "n", Value: int32(7)}},
	} {
		if k := key(q1, other); k == a {
			t.Errorf("%v: the same key as another task's parameters", other)
		}
	}
	if key(q2, bson.D{{Key: "n", Value: int32(7)}, {Key: "s", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: bson.A{"a", 2.5}}}}}) == a {
		t.Error("another queue: the same key")
	}
}
