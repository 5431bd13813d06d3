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

// The page's bulk purge counts the ended tasks a selection holds, bounds
// it by the newest, and removes it page by page: a page is oldest first,
// leaves out an ended task that an unended one comes after (the count
// includes it), and says where the next page starts.
func TestRetiringCountsPagesAndRemoves(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	r := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	succeeded, failed, needed, cancelled, queued, waits := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	set := func(id bson.ObjectID, fields bson.D) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: fields}})
	}
	set(succeeded, bson.D{{Key: "status", Value: queue.StatusSucceeded}})
	set(failed, bson.D{{Key: "status", Value: queue.StatusFailed}})
	set(needed, bson.D{{Key: "status", Value: queue.StatusSucceeded}, {Key: queue.FieldHasDependents, Value: true}})
	set(cancelled, bson.D{{Key: "status", Value: queue.StatusCancelled}})
	set(waits, bson.D{{Key: "status", Value: queue.StatusBlocked}, {Key: queue.FieldAfter, Value: bson.A{needed}}})

	all := queue.RetireFilter{}
	if n, err := r.RetireCount(ctx, all); err != nil || n != 4 {
		t.Fatalf("Count = %d, %v; want the 4 ended tasks", n, err)
	}
	if newest, err := r.RetireNewest(ctx, all); err != nil || newest != cancelled {
		t.Fatalf("Newest = %s, %v; want %s", newest.Hex(), err, cancelled.Hex())
	}
	none := queue.RetireFilter{TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{bson.NewObjectID()}}}
	if newest, err := r.RetireNewest(ctx, none); err != nil || !newest.IsZero() {
		t.Fatalf("Newest of nothing = %s, %v; want zero", newest.Hex(), err)
	}
	if n, err := r.RetireCount(ctx, none); err != nil || n != 0 {
		t.Fatalf("Count of nothing = %d, %v", n, err)
	}

	page := all
	page.Limit = 3
	tasks, read, last, err := r.RetirePage(ctx, page)
	if err != nil || read != 3 || last != needed || !slices.Equal(taskIDs(tasks), []bson.ObjectID{succeeded, failed}) {
		t.Fatalf("first page: %v, read %d, last %s, %v; want the first two (the third is needed), 3 read, last %s",
			taskIDs(tasks), read, last.Hex(), err, needed.Hex())
	}
	retired, err := r.RetireTasks(ctx, tasks, queue.RetireDelete)
	if err != nil || retired.Tasks != 2 {
		t.Fatalf("Retire = %+v, %v; want 2 tasks", retired, err)
	}
	page.AfterID = last
	tasks, read, last, err = r.RetirePage(ctx, page)
	if err != nil || read != 1 || last != cancelled || !slices.Equal(taskIDs(tasks), []bson.ObjectID{cancelled}) {
		t.Fatalf("next page: %v, read %d, last %s, %v; want the cancelled one", taskIDs(tasks), read, last.Hex(), err)
	}
	if n, err := r.RetireCount(ctx, all); err != nil || n != 2 {
		t.Fatalf("Count after the first page = %d, %v; want 2", n, err)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{succeeded, failed}}}}}); n != 0 {
		t.Fatalf("%d of the retired tasks left", n)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: queued}}); n != 1 {
		t.Fatalf("the queued task: %d, want it untouched", n)
	}
	if q := mustQueue(t, s, qid); q.CountTotal == nil || *q.CountTotal != 4 {
		t.Fatalf("the queue's count_total is %s, want 6 less the 2 retired", count(q.CountTotal))
	}
}

func taskIDs(tasks []queue.Task) []bson.ObjectID {
	ids := make([]bson.ObjectID, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids
}

// A task runner's own store reads its task and its queue (nil when
// either is gone), counts its task done in the queue, and settles what
// comes after tasks that ended: a success releases the tasks waiting for
// it alone, a failure cancels those waiting for it and theirs. Settling
// twice changes nothing more.
func TestRunnerStoreReadsCountsAndSettles(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	rs := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	ok, bad, released, stillWaits, cancelled, cancelledToo := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	set := func(id bson.ObjectID, fields bson.D) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: fields}})
	}
	waitFor := func(id bson.ObjectID, on ...bson.ObjectID) {
		set(id, bson.D{{Key: "status", Value: queue.StatusBlocked}, {Key: queue.FieldAfter, Value: on}, {Key: queue.FieldWaiting, Value: on}, {Key: queue.FieldAfterWas, Value: on}})
	}
	set(ok, bson.D{{Key: "status", Value: queue.StatusSucceeded}})
	set(bad, bson.D{{Key: "status", Value: queue.StatusFailed}})
	waitFor(released, ok)
	waitFor(stillWaits, ok, bson.NewObjectID())
	waitFor(cancelled, bad)
	waitFor(cancelledToo, cancelled)

	q, err := rs.QueueDoc(ctx, qid)
	if err != nil || q == nil || q.Name != "q" || q.CountTodo == nil || *q.CountTodo != 6 {
		t.Fatalf("QueueDoc = %v, %v; want queue q with 6 to do", q, err)
	}
	if q, err := rs.QueueDoc(ctx, bson.NewObjectID()); q != nil || err != nil {
		t.Fatalf("QueueDoc of no queue = %v, %v; want nil, nil", q, err)
	}
	if err := rs.DecrementTodo(ctx, qid); err != nil {
		t.Fatal(err)
	}
	if q, err := rs.QueueDoc(ctx, qid); err != nil || q == nil || q.CountTodo == nil || *q.CountTodo != 5 || q.CountTotal == nil || *q.CountTotal != 6 {
		t.Fatalf("after DecrementTodo: %v, %v; want 5 to do of 6", q, err)
	}
	task, err := rs.Task(ctx, ok)
	if err != nil || task == nil || task.ID != ok || task.Status != queue.StatusSucceeded || task.Queue != qid {
		t.Fatalf("Task = %+v, %v; want the succeeded task", task, err)
	}

	now := time.Now()
	ended := []queue.EndedTask{{ID: ok, Status: queue.StatusSucceeded}, {ID: bad, Status: queue.StatusFailed}}
	n, gone, err := rs.SettleDependents(ctx, ended, now)
	slices.SortFunc(gone, func(a, b bson.ObjectID) int { return strings.Compare(a.Hex(), b.Hex()) })
	if err != nil || n != 1 || !slices.Equal(gone, []bson.ObjectID{cancelled, cancelledToo}) {
		t.Fatalf("SettleDependents = %d released, %v cancelled, %v; want 1 and [%s %s]", n, gone, err, cancelled.Hex(), cancelledToo.Hex())
	}
	for id, want := range map[bson.ObjectID]int{released: queue.StatusQueued, stillWaits: queue.StatusBlocked,
		cancelled: queue.StatusCancelled, cancelledToo: queue.StatusCancelled} {
		task, err := rs.Task(ctx, id)
		if err != nil || task == nil || task.Status != want {
			t.Errorf("task %s after settling: %+v, %v; want status %d", id.Hex(), task, err, want)
		}
	}
	if n, gone, err := rs.SettleDependents(ctx, ended, now); err != nil || n != 0 || len(gone) != 0 {
		t.Fatalf("settling again = %d, %v, %v; want nothing more", n, gone, err)
	}
}

// A run records its usage while it goes on, on its task as long as the
// task is still that run's (its node, running, its token); otherwise
// SetUsage reports false and writes nothing.
func TestSetUsageOnlyOnItsOwnRun(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	rs := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	token := bson.NewObjectID()
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "node", Value: "n"}, {Key: "status", Value: queue.StatusRunning}, {Key: "runner", Value: bson.D{{Key: "token", Value: token}}}}}})
	at := time.Now().UTC().Truncate(time.Millisecond)
	u := queue.Usage{WallS: 1.5, CPUUserS: 0.25, PeakRSSMB: 12, Samples: 3, At: at, Running: true}
	if ok, err := rs.SetUsage(ctx, id, "n", token, u); err != nil || !ok {
		t.Fatalf("SetUsage on its own run = %v, %v; want true", ok, err)
	}
	got, ok := queue.UsageOf(dentest.Task(t, db, id))
	if !ok || got.WallS != 1.5 || got.CPUUserS != 0.25 || got.PeakRSSMB != 12 || got.Samples != 3 || !got.At.Equal(at) || !got.Running {
		t.Fatalf("the usage recorded: %+v (%v), want %+v", got, ok, u)
	}
	other := u
	other.WallS = 99
	for _, tc := range []struct {
		name  string
		node  string
		token bson.ObjectID
	}{{"another token", "n", bson.NewObjectID()}, {"another node", "m", token}} {
		if ok, err := rs.SetUsage(ctx, id, tc.node, tc.token, other); err != nil || ok {
			t.Fatalf("SetUsage with %s = %v, %v; want false", tc.name, ok, err)
		}
	}
	if got, _ := queue.UsageOf(dentest.Task(t, db, id)); got.WallS != 1.5 {
		t.Fatalf("the usage after refused writes: %+v, want the first", got)
	}
}
