package queue_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// den queue delete removes the queue's document only: its tasks stay, as
// Disbatch's deleteQueue leaves them, and other queues are untouched. A
// queue that is not there (deleted already) is ErrNoQueue.
func TestDeleteQueueLeavesItsTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	gone := dentest.Queue(t, db, "gone", "P", 1, queue.SortFIFO)
	kept := dentest.Queue(t, db, "kept", "P", 1, queue.SortFIFO)
	dentest.Tasks(t, db, gone, bson.D{}, bson.D{})
	dentest.Tasks(t, db, kept, bson.D{})

	if err := s.DeleteQueue(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if n := dentest.Count(t, db.Collection(queue.QueuesCollection), bson.D{{Key: "_id", Value: gone}}); n != 0 {
		t.Fatalf("the deleted queue is still there (%d)", n)
	}
	if n := dentest.Count(t, db.Collection(queue.QueuesCollection), bson.D{{Key: "_id", Value: kept}}); n != 1 {
		t.Fatalf("the other queue: %d documents, want 1", n)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: gone}}); n != 2 {
		t.Fatalf("the deleted queue's tasks: %d left, want its 2", n)
	}
	if err := s.DeleteQueue(ctx, gone); !errors.Is(err, queue.ErrNoQueue) {
		t.Fatalf("deleting it again: %v, want ErrNoQueue", err)
	}
}

// den schedule delete removes the schedule (true), and the tasks it
// inserted stay; a name no schedule has is false, not an error.
func TestDeleteScheduleLeavesItsTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	now := time.Now()
	if _, err := s.AddSchedule(ctx, queue.ScheduleSpec{Name: "hourly", Queue: qid, Every: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	task, inserted, err := queue.NewStore(db).RunScheduleNow(ctx, "hourly", now)
	if err != nil || !inserted {
		t.Fatalf("run the schedule now: %v, %v", inserted, err)
	}
	if deleted, err := s.DeleteSchedule(ctx, "hourly"); err != nil || !deleted {
		t.Fatalf("DeleteSchedule = %v, %v; want true", deleted, err)
	}
	if sc, err := s.Schedule(ctx, "hourly"); err != nil || sc != nil {
		t.Fatalf("the schedule after its delete: %v, %v; want none", sc, err)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: task}}); n != 1 {
		t.Fatalf("the task it inserted: %d, want it kept", n)
	}
	if deleted, err := s.DeleteSchedule(ctx, "hourly"); err != nil || deleted {
		t.Fatalf("deleting it again: %v, %v; want false, nil", deleted, err)
	}
}

// Retention deletes the Demo plugin's reports of the tasks it retires,
// and only theirs; no tasks is no command.
func TestDeleteReportsOfTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	a, b, c := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	reports := db.Collection(queue.ReportsCollection)
	dentest.Insert(t, reports, bson.D{{Key: "task_id", Value: a}}, bson.D{{Key: "task_id", Value: a}},
		bson.D{{Key: "task_id", Value: b}}, bson.D{{Key: "task_id", Value: c}}, bson.D{{Key: "task_id", Value: a.Hex()}})
	n, err := s.DeleteReports(ctx, []bson.ObjectID{a, b})
	if err != nil || n != 3 {
		t.Fatalf("DeleteReports(a, b) = %d, %v; want 3", n, err)
	}
	if left := dentest.Count(t, reports, bson.D{}); left != 2 {
		t.Fatalf("%d reports left, want c's and the one whose task_id is a string", left)
	}
	if left := dentest.Count(t, reports, bson.D{{Key: "task_id", Value: c}}); left != 1 {
		t.Fatalf("c's report: %d, want kept", left)
	}
	if n, err := s.DeleteReports(ctx, nil); n != 0 || err != nil {
		t.Fatalf("DeleteReports(none) = %d, %v", n, err)
	}
}

// The stats are trimmed a batch at a time: at most limit of the documents
// older than the time given, never a newer one; fewer than limit says
// none older is left.
func TestTrimStatsInBatches(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	cut := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	stats := db.Collection(queue.StatsCollection)
	var docs []any
	for i, d := range []time.Duration{-3 * time.Hour, -2 * time.Hour, -time.Second, 0, time.Hour} {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "t", Value: cut.Add(d)}, {Key: "kind", Value: queue.StatQueue}})
	}
	dentest.Insert(t, stats, docs...)
	for _, want := range []int64{2, 1, 0} {
		n, err := s.TrimStats(ctx, cut, 2)
		if err != nil || n != want {
			t.Fatalf("TrimStats = %d, %v; want %d", n, err, want)
		}
	}
	if left := dentest.Count(t, stats, bson.D{{Key: "t", Value: bson.D{{Key: "$gte", Value: cut}}}}); left != 2 {
		t.Fatalf("%d stats at or after the cut left, want both", left)
	}
	if left := dentest.Count(t, stats, bson.D{}); left != 2 {
		t.Fatalf("%d stats left, want the 2 not older", left)
	}
}

// Run now inserts the schedule's task at once, paused or not, counted in
// its queue and noted as its last task; its next time stays. The same
// second again inserts nothing more (a form sent twice); a name no
// schedule has is ErrNoSchedule, and a schedule that cannot fire inserts
// nothing and says why.
func TestRunNow(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	runs := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	now := time.Now()
	params := mustRaw(t, bson.D{{Key: "n", Value: int32(1)}})
	sc, err := s.AddSchedule(ctx, queue.ScheduleSpec{Name: "daily", Queue: qid, Every: 24 * time.Hour, Parameters: params}, now)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.PauseSchedule(ctx, "daily", true, now); err != nil || !ok {
		t.Fatalf("pause: %v, %v", ok, err)
	}

	id, inserted, err := runs.RunScheduleNow(ctx, "daily", now)
	if err != nil || !inserted || id.IsZero() {
		t.Fatalf("RunNow = %s, %v, %v; want a task inserted", id.Hex(), inserted, err)
	}
	task := dentest.Task(t, db, id)
	if q, _ := task.Lookup("queue").ObjectIDOK(); q != qid {
		t.Errorf("the task's queue is %s, want %s", task.Lookup("queue"), qid.Hex())
	}
	if st, _ := task.Lookup("status").AsInt64OK(); st != queue.StatusQueued {
		t.Errorf("the task's status is %s, want queued", task.Lookup("status"))
	}
	if n, _ := task.Lookup("parameters", "n").AsInt64OK(); n != 1 {
		t.Errorf("the task's parameters are %s, the schedule's are %s", task.Lookup("parameters"), params)
	}
	q := mustQueue(t, s, qid)
	if q.CountTodo == nil || *q.CountTodo != 1 || q.CountTotal == nil || *q.CountTotal != 1 {
		t.Errorf("the queue counts %s todo, %s in all; want 1 and 1", count(q.CountTodo), count(q.CountTotal))
	}
	after, err := s.Schedule(ctx, "daily")
	if err != nil || after == nil {
		t.Fatalf("read the schedule: %v, %v", after, err)
	}
	if after.LastTask != id || !after.Next.Equal(sc.Next) || !after.Paused {
		t.Errorf("the schedule after: last task %s, next %s, paused %v; want %s, %s as before, still paused",
			after.LastTask.Hex(), after.Next, after.Paused, id.Hex(), sc.Next)
	}

	again, inserted, err := runs.RunScheduleNow(ctx, "daily", now.Truncate(time.Second).Add(time.Second-1))
	if err != nil || inserted || again != id {
		t.Fatalf("the same second again: %s, %v, %v; want %s, not inserted", again.Hex(), inserted, err, id.Hex())
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "daily"}}); n != 1 {
		t.Fatalf("%d tasks of the schedule, want 1", n)
	}

	if _, _, err := runs.RunScheduleNow(ctx, "nightly", now); !errors.Is(err, queue.ErrNoSchedule) {
		t.Fatalf("RunNow of no schedule: %v, want ErrNoSchedule", err)
	}
	dentest.Insert(t, db.Collection(queue.SchedulesCollection), bson.D{{Key: "_id", Value: "broken"}, {Key: "queue", Value: "q"}, {Key: "every", Value: 60}})
	if _, inserted, err := runs.RunScheduleNow(ctx, "broken", now); err == nil || inserted {
		t.Fatalf("RunNow of a schedule whose queue is a string: %v, %v; want an error", inserted, err)
	} else if want := `schedule "broken" cannot fire: queue is not an ObjectId`; err.Error() != want {
		t.Fatalf("RunNow of a schedule whose queue is a string: %q, want %q", err, want)
	}
	if n := dentest.CountTasks(t, db, bson.D{}); n != 1 {
		t.Fatalf("%d tasks, want the one", n)
	}
}

// count shows a queue's count as read (nil: missing or not a number).
func count(n *int64) string {
	if n == nil {
		return "no number"
	}
	return fmt.Sprint(*n)
}
