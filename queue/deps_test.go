package queue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A task's after is read as a list of task ids: an array of ObjectIds
// (each once), or one ObjectId; anything else is a problem that says
// what after holds. Registering a blocked task (MarkWaiting) records what
// it waits for and after as read, once: a registered, claimed or changed
// task is left alone; BlockedTasks then reads both back.
func TestBlockedTasksRegister(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	d1, d2 := bson.NewObjectID(), bson.NewObjectID()
	blocked := func(after any) bson.ObjectID {
		return dentest.TaskWith(t, db, qid, bson.D{}, bson.E{Key: queue.FieldAfter, Value: after})
	}
	cases := []struct {
		name    string
		after   any
		want    []bson.ObjectID
		problem string
	}{
		{"an array", bson.A{d1, d2}, []bson.ObjectID{d1, d2}, ""},
		{"an array naming one twice", bson.A{d2, d1, d2}, []bson.ObjectID{d2, d1}, ""},
		{"one id", d1, []bson.ObjectID{d1}, ""},
		{"an empty array", bson.A{}, []bson.ObjectID{}, ""},
		{"text", d1.Hex(), nil, "after is "},
		{"an array holding text", bson.A{d1, d2.Hex()}, nil, "after holds "},
	}
	ids := map[bson.ObjectID]int{}
	for i, c := range cases {
		id := blocked(c.after)
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusBlocked}}}})
		ids[id] = i
	}
	dentest.Tasks(t, db, qid, bson.D{}) // queued, without after: not read
	read, err := store.BlockedTasks(ctx, []bson.ObjectID{qid}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(cases) {
		t.Fatalf("%d blocked tasks read, want %d", len(read), len(cases))
	}
	for _, b := range read {
		c := cases[ids[b.ID]]
		if b.Queue != qid || b.Status != queue.StatusBlocked || b.Registered || !slices.Equal(b.After, c.want) ||
			c.problem == "" && b.Problem != "" || c.problem != "" && !strings.HasPrefix(b.Problem, c.problem) {
			t.Errorf("%s: read as %+v, want after %v, problem %q", c.name, b, c.want, c.problem)
		}
		if c.problem != "" {
			continue
		}
		waiting := b.After[min(1, len(b.After)):] // the first succeeded, say
		if ok, err := store.MarkWaiting(ctx, b, waiting); err != nil || !ok {
			t.Fatalf("%s: register: %v, %v", c.name, ok, err)
		}
		if ok, err := store.MarkWaiting(ctx, b, nil); err != nil || ok {
			t.Errorf("%s: register it again: %v, %v; want false", c.name, ok, err)
		}
	}
	again, err := store.BlockedTasks(ctx, []bson.ObjectID{qid}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range again {
		c := cases[ids[b.ID]]
		if c.problem != "" {
			if b.Registered {
				t.Errorf("%s: registered", c.name)
			}
			continue
		}
		if !b.Registered || !slices.Equal(b.AfterWas, c.want) || !slices.Equal(b.Waiting, c.want[min(1, len(c.want)):]) {
			t.Errorf("%s: registered as %+v, want after_was %v and waiting all but the first", c.name, b, c.want)
		}
		if w := dentest.Task(t, db, b.ID).Lookup(queue.FieldWaiting); w.Type != bson.TypeArray {
			t.Errorf("%s: waiting stored as %v, want an array", c.name, w)
		}
	}

	// A task that was claimed, or changed status, since it was read is
	// not registered.
	for _, change := range []bson.D{
		{{Key: "node", Value: "n"}, {Key: "status", Value: queue.StatusClaimed}},
		{{Key: "status", Value: queue.StatusQueued}},
	} {
		id := blocked(bson.A{d1})
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusBlocked}}}})
		b := queue.Blocked{ID: id, Queue: qid, Status: queue.StatusBlocked, After: []bson.ObjectID{d1}} // as read
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: change}})
		if ok, err := store.MarkWaiting(ctx, b, []bson.ObjectID{d1}); err != nil || ok {
			t.Errorf("register a task changed since (%v): %v, %v; want false", change, ok, err)
		}
		if dentest.Task(t, db, id).Lookup(queue.FieldAfterWas).Type != 0 {
			t.Errorf("a task changed since (%v) was registered", change)
		}
	}
	if got, err := store.BlockedTasks(ctx, nil, 100); err != nil || got != nil {
		t.Errorf("BlockedTasks of no queue: %v, %v", got, err)
	}
}

// A blocked task whose after cannot be is failed (2) with the reason in
// its stderr and its outcome (malformed), on condition that it is still
// unclaimed in the status read.
func TestFailBlocked(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{})
	failing, claimed, changed := ids[0], ids[1], ids[2]
	for _, id := range ids {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusBlocked}, {Key: queue.FieldAfter, Value: "x"}}}})
	}
	// Another node's, whatever its status says.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: claimed}}, bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: "n"}}}})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: changed}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusQueued}}}})
	now := time.Now().Truncate(time.Millisecond)
	reason := "after is a string; it must be an array of task ids (ObjectIds)"

	for _, id := range []bson.ObjectID{claimed, changed} {
		if ok, err := store.FailBlocked(ctx, queue.Blocked{ID: id, Queue: qid, Status: queue.StatusBlocked}, reason, now); err != nil || ok {
			t.Errorf("fail a task claimed or changed since: %v, %v; want false", ok, err)
		}
		if st := dentest.Task(t, db, id).Lookup("status").AsInt64(); st == queue.StatusFailed {
			t.Errorf("a task claimed or changed since was failed")
		}
	}
	ok, err := store.FailBlocked(ctx, queue.Blocked{ID: failing, Queue: qid, Status: queue.StatusBlocked}, reason, now)
	if err != nil || !ok {
		t.Fatalf("fail: %v, %v", ok, err)
	}
	raw := dentest.Task(t, db, failing)
	if raw.Lookup("status").AsInt64() != queue.StatusFailed || raw.Lookup("stderr").StringValue() != "den: task not run: "+reason+"\n" ||
		raw.Lookup("stdout").StringValue() != "" || raw.Lookup(queue.FieldOutcome).StringValue() != queue.OutcomeMalformed ||
		raw.Lookup(queue.FieldOutcomeReason).StringValue() != reason || !raw.Lookup("mtime").Time().Equal(now) {
		t.Errorf("failed task: %v", raw)
	}
	if ok, err := store.FailBlocked(ctx, queue.Blocked{ID: failing, Queue: qid, Status: queue.StatusBlocked}, reason, now); err != nil || ok {
		t.Errorf("fail it again: %v, %v; want false", ok, err)
	}
}

// MarkDependents sets has_dependents on the given tasks and no other,
// through the node's and the operator's stores alike; none given writes
// nothing. Statuses reads the status of the tasks that exist.
func TestMarkDependentsAndStatuses(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	stores := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[1]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusSucceeded}}}})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[2]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "odd"}}}})
	marked := func() []bson.ObjectID {
		var out []bson.ObjectID
		for _, id := range ids {
			if dentest.Task(t, db, id).Lookup(queue.FieldHasDependents).Type == bson.TypeBoolean {
				out = append(out, id)
			}
		}
		return out
	}
	for _, mark := range []func([]bson.ObjectID) error{
		func(ids []bson.ObjectID) error { return stores.MarkDependents(ctx, ids) },
		func(ids []bson.ObjectID) error { return stores.MarkDependents(ctx, ids) },
	} {
		if err := mark(nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := marked(); got != nil {
		t.Fatalf("marking none marked %v", got)
	}
	if err := stores.MarkDependents(ctx, []bson.ObjectID{ids[0], bson.NewObjectID()}); err != nil {
		t.Fatal(err)
	}
	if err := stores.MarkDependents(ctx, []bson.ObjectID{ids[2]}); err != nil {
		t.Fatal(err)
	}
	if got := marked(); !slices.Equal(got, []bson.ObjectID{ids[0], ids[2]}) {
		t.Errorf("marked %v, want %v", got, []bson.ObjectID{ids[0], ids[2]})
	}
	if n := dentest.CountTasks(t, db, bson.D{}); n != 4 {
		t.Errorf("%d tasks, want 4: marking made one", n)
	}

	gone := bson.NewObjectID()
	want := map[bson.ObjectID]int{ids[0]: queue.StatusQueued, ids[1]: queue.StatusSucceeded, ids[2]: 0}
	for _, statuses := range []func([]bson.ObjectID) (map[bson.ObjectID]int, error){
		func(ids []bson.ObjectID) (map[bson.ObjectID]int, error) { return stores.Statuses(ctx, ids) },
		func(ids []bson.ObjectID) (map[bson.ObjectID]int, error) { return stores.Statuses(ctx, ids) },
	} {
		got, err := statuses([]bson.ObjectID{ids[0], ids[1], ids[2], gone})
		if err != nil || len(got) != len(want) {
			t.Fatalf("statuses: %v, %v; want %v", got, err, want)
		}
		for id, st := range want {
			if s, ok := got[id]; !ok || s != st {
				t.Errorf("status of %s: %d (%v), want %d", id.Hex(), s, ok, st)
			}
		}
	}
}
