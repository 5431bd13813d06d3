package den_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// blockedTask inserts a task as a mongosh user would: blocked (-4), with
// after, nothing registered.
func blockedTask(t *testing.T, db *mongo.Database, qid bson.ObjectID, commands string, after ...bson.ObjectID) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	insertBlocked(t, db, id, qid, commands, after)
	return id
}

func insertBlocked(t *testing.T, db *mongo.Database, id, qid bson.ObjectID, commands string, after []bson.ObjectID) {
	t.Helper()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: -4}, {Key: "node", Value: -1},
		{Key: "parameters", Value: bson.D{{Key: "commands", Value: commands}}}, {Key: "after", Value: after},
		{Key: "ctime", Value: time.Now()}, {Key: "mtime", Value: time.Now()}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil}})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}, {Key: "count_total", Value: 1}}}})
}

func str(raw bson.Raw, key ...string) string {
	s, _ := raw.Lookup(key...).StringValueOK()
	return s
}

// Tasks that come after others run once those succeeded, in order; when
// one fails, what comes after it is cancelled with the reason,
// transitively; tasks whose after cannot be (a missing task, a cycle, a
// change after registration) fail with the reason. Both ways of adding
// them: registered at insert (den task add --after, released by the
// finishing runner) and inserted blocked by hand (registered by the sweep).
func TestDependencies(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 4, "fifo")

	// Registered at insert, as den task add --after does: b after a, c
	// after b.
	a := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
	if err := store.MarkDependents(ctx, []bson.ObjectID{a}); err != nil {
		t.Fatal(err)
	}
	raw, _ := bson.Marshal(bson.D{{Key: "commands", Value: "a"}})
	b, err := store.InsertTasks(ctx, qid, []bson.Raw{raw}, time.Now(), queue.InsertOptions{After: []bson.ObjectID{a}, Waiting: []bson.ObjectID{a}})
	if err != nil {
		t.Fatal(err)
	}
	store.MarkDependents(ctx, b)
	c, err := store.InsertTasks(ctx, qid, []bson.Raw{raw}, time.Now(), queue.InsertOptions{After: b, Waiting: b})
	if err != nil {
		t.Fatal(err)
	}
	// By hand: d after a and a failing x; e after d; f after a missing task;
	// g and h after each other; i registered after held, then changed.
	x := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "c"}})[0] // c fails
	d := blockedTask(t, db, qid, "a", a, x)
	e := blockedTask(t, db, qid, "a", d)
	f := blockedTask(t, db, qid, "a", bson.NewObjectID())
	g, h := bson.NewObjectID(), bson.NewObjectID()
	insertBlocked(t, db, g, qid, "a", []bson.ObjectID{h})
	insertBlocked(t, db, h, qid, "a", []bson.ObjectID{g})
	held := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0] // held back (-3): never ends
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: held}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -3}}}})
	i := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: i}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: -4}, {Key: "after", Value: bson.A{held, a}}, {Key: "after_was", Value: bson.A{held}}, {Key: "waiting", Value: bson.A{held}}}}})

	startNode(t, db, "n")
	rawA, rawB, rawC := dentest.WaitStatus(t, db, a, 1), dentest.WaitStatus(t, db, b[0], 1), dentest.WaitStatus(t, db, c[0], 1)
	startOf := func(r bson.Raw) time.Time { return r.Lookup("runner", "at").Time() }
	endOf := func(r bson.Raw) time.Time { return r.Lookup("mtime").Time() }
	if !startOf(rawB).After(endOf(rawA).Add(-time.Millisecond)) || !startOf(rawC).After(endOf(rawB).Add(-time.Millisecond)) {
		t.Errorf("chain out of order: a ended %v, b started %v, ended %v, c started %v", endOf(rawA), startOf(rawB), endOf(rawB), startOf(rawC))
	}
	dentest.WaitStatus(t, db, x, 2)
	for _, tc := range []struct {
		id      bson.ObjectID
		status  int64
		outcome string
		reason  string
	}{
		{d, -5, queue.OutcomeCancelled, x.Hex() + ", which it comes after, ended with status 2"},
		// e is cancelled in the cascade from x, or, when a sweep sees d
		// cancelled first, for d's sake: both say why.
		{e, -5, queue.OutcomeCancelled, "cancelled because task " + x.Hex() + "|" + d.Hex() + ", which it comes after, ended with status -5"},
		{f, 2, queue.OutcomeMalformed, "which do(es) not exist"},
		{g, 2, queue.OutcomeMalformed, "cycle"},
		{h, 2, queue.OutcomeMalformed, "cycle"},
		{i, 2, queue.OutcomeMalformed, "dependencies can only be given when a task is created"},
	} {
		r := dentest.WaitStatus(t, db, tc.id, tc.status)
		says := func(field string) bool {
			for _, want := range strings.Split(tc.reason, "|") {
				if strings.Contains(str(r, field), want) {
					return true
				}
			}
			return false
		}
		if str(r, "outcome") != tc.outcome || !says("outcome_reason") || !says("stderr") {
			t.Errorf("task %s: outcome %q (%q), stderr %q; want %q with %q", tc.id.Hex(), str(r, "outcome"), str(r, "outcome_reason"), str(r, "stderr"), tc.outcome, tc.reason)
		}
	}
	// Counts stay right: failed tasks left count_todo, cancelled ones did not.
	var drift []queue.CountDrift
	dentest.Eventually(t, time.Minute, "counts settle", func() bool {
		drift, err = store.CheckCounts(ctx)
		ok := err == nil
		for _, d := range drift {
			ok = ok && !d.Drifted()
		}
		if !ok {
			t.Logf("drift %+v %v", drift, err)
		}
		return ok
	})
}

// A node that crashed half way through releasing what came after a task
// that succeeded (its result recorded, the dependents' waiting lists not
// yet pulled, or pulled but not yet queued): the next node's sweep
// finishes the release, and the dependents run.
func TestDependentsOfACrashedReleaseRun(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 2, "fifo")
	done := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: done}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 1}, {Key: "node", Value: "crashed"}, {Key: "has_dependents", Value: true}}}})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -1}}}})
	notPulled := blockedTask(t, db, qid, "a", done)
	pulled := blockedTask(t, db, qid, "a", done)
	registered := func(id bson.ObjectID, waiting bson.A) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "after_was", Value: bson.A{done}}, {Key: "waiting", Value: waiting}}}})
	}
	registered(notPulled, bson.A{done})
	registered(pulled, bson.A{})
	startNode(t, db, "n")
	dentest.WaitStatus(t, db, notPulled, 1)
	dentest.WaitStatus(t, db, pulled, 1)
}
