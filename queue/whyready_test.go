package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// den task why's reasons of a queue: a paused queue says since when, by
// whom and the command that resumes it (by name, or by id when den takes
// no such name); a queue whose serving nodes are all at a limit says it is
// full, and how (its threads on all nodes, or each node's maxthreads).
func TestQueueReasonsPausedAndFull(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	qid := bson.NewObjectID()
	other := bson.NewObjectID()
	node := func(name string, maxThreads *int, problem string) queue.NodeDoc {
		return queue.NodeDoc{Name: name, Timestamp: now, Queues: []queue.NodeQueue{{ID: qid.Hex()}},
			MaxThreads: maxThreads, MaxThreadsProblem: problem}
	}
	hexName := bson.NewObjectID().Hex() // a name den does not give: 24 hexadecimal digits
	for _, tc := range []struct {
		name    string
		q       queue.Queue
		nodes   []queue.NodeDoc
		running queue.Running
		code    string // the reason wanted ("": none)
		text    []string
	}{
		{"paused since and by", queue.Queue{Name: "q", MaxThreads: 0, Paused: &queue.Pause{At: now.Add(-time.Hour), By: "alice"}},
			[]queue.NodeDoc{node("a", nil, "")}, nil,
			queue.WhyPaused, []string{"queue q is paused since 2026-12-01T11:00:00Z by alice (den queue resume q)"}},
		{"paused, nothing known", queue.Queue{Name: "q", Paused: &queue.Pause{}},
			[]queue.NodeDoc{node("a", nil, "")}, nil,
			queue.WhyPaused, []string{"queue q is paused (den queue resume q)"}},
		{"paused, named by its id", queue.Queue{Name: hexName, Paused: &queue.Pause{By: "bob"}},
			[]queue.NodeDoc{node("a", nil, "")}, nil,
			queue.WhyPaused, []string{" by bob (den queue resume " + qid.Hex() + ")"}},
		{"full on all nodes", queue.Queue{Name: "q", MaxThreads: 2, Global: true},
			[]queue.NodeDoc{node("a", nil, ""), node("b", nil, "")}, queue.Running{qid: {"a": 2}},
			queue.WhyFull, []string{"queue q is full: 2 of its tasks are claimed or running, its threads limit on all nodes is 2"}},
		{"room on all nodes", queue.Queue{Name: "q", MaxThreads: 3, Global: true},
			[]queue.NodeDoc{node("a", nil, "")}, queue.Running{qid: {"a": 2}},
			"", nil},
		{"full on each node", queue.Queue{Name: "q", MaxThreads: 1},
			[]queue.NodeDoc{node("a", nil, ""), node("b", nil, "")}, queue.Running{qid: {"a": 1, "b": 1}},
			queue.WhyFull, []string{"queue q is full on every live node that serves it (a, b): 2 of its tasks", "at most 1 of them (maxthreads)"}},
		{"room on one node", queue.Queue{Name: "q", MaxThreads: 1},
			[]queue.NodeDoc{node("a", nil, ""), node("b", nil, "")}, queue.Running{qid: {"a": 1}},
			"", nil},
		{"the other node at its own limit", queue.Queue{Name: "q", MaxThreads: 1},
			[]queue.NodeDoc{node("a", nil, ""), node("b", ptr(1), "")}, queue.Running{qid: {"a": 1}, other: {"b": 1}},
			queue.WhyFull, []string{"(a, b): 1 of its tasks"}},
		{"the other node's limit unreadable", queue.Queue{Name: "q", MaxThreads: 1},
			[]queue.NodeDoc{node("a", nil, ""), node("b", nil, "maxthreads is a string")}, queue.Running{qid: {"a": 1}},
			queue.WhyFull, []string{"(a, b)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.q.ID = qid
			f := &queue.Facts{Now: now, DeadAfter: time.Minute, Queues: map[bson.ObjectID]queue.Queue{qid: tc.q},
				Nodes: tc.nodes, Running: tc.running}
			reasons := f.QueueReasons(tc.q)
			if tc.code == "" {
				if len(reasons) > 0 {
					t.Fatalf("reasons %v, want none: a node takes its tasks", reasons)
				}
				return
			}
			if len(reasons) != 1 || reasons[0].Code != tc.code {
				t.Fatalf("reasons %v, want one, %s", reasons, tc.code)
			}
			for _, part := range tc.text {
				if !strings.Contains(reasons[0].Text, part) {
					t.Errorf("reason %q does not say %q", reasons[0].Text, part)
				}
			}
		})
	}
}

// A task that nothing holds is ready, and den task why says how many a
// claim takes before it: the tasks of higher priority (a task without one
// counting as 0, a negative one below it), then those of its own
// priority before it in the queue's order. The task is read through a
// runner's store.
func TestWhyReadyCountsTheTasksBeforeIt(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	runner := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 4, queue.SortFIFO)
	prio := func(p int) bson.E { return bson.E{Key: queue.FieldPriority, Value: int32(p)} }
	high := dentest.TaskWith(t, db, qid, bson.D{}, prio(5))
	first := dentest.TaskWith(t, db, qid, bson.D{})
	second := dentest.TaskWith(t, db, qid, bson.D{})
	low := dentest.TaskWith(t, db, qid, bson.D{}, prio(-1))
	dentest.TaskWith(t, db, qid, bson.D{}) // after all of them

	now := time.Now()
	q := mustQueue(t, s, qid)
	f := &queue.Facts{Now: now, DeadAfter: time.Minute, Queues: map[bson.ObjectID]queue.Queue{qid: q},
		Nodes: []queue.NodeDoc{{Name: "a", Timestamp: now, Queues: []queue.NodeQueue{{ID: qid.Hex()}}}}}
	for _, tc := range []struct {
		name string
		id   bson.ObjectID
		want string
	}{
		{"highest", high, "takes it after the 0 queued tasks of higher priority than its 5, then after the 0 of its priority queued before it (fifo)"},
		{"first of priority 0", first, "takes it after the 1 queued tasks of higher priority than its 0, then after the 0 of its priority queued before it (fifo)"},
		{"second of priority 0", second, "takes it after the 1 queued tasks of higher priority than its 0, then after the 1 of its priority queued before it (fifo)"},
		{"below 0", low, "takes it after the 4 queued tasks of higher priority than its -1, then after the 0 of its priority queued before it (fifo)"},
	} {
		task, err := runner.Task(ctx, tc.id)
		if err != nil || task == nil {
			t.Fatalf("read task %s: %v, %v", tc.id.Hex(), task, err)
		}
		reasons, err := s.Why(ctx, f, *task)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(reasons) != 1 || reasons[0].Code != queue.WhyReady || !strings.HasSuffix(reasons[0].Text, tc.want) {
			t.Errorf("%s: reasons %v, want one, ready, ending %q", tc.name, reasons, tc.want)
		}
	}
	if task, err := runner.Task(ctx, bson.NewObjectID()); task != nil || err != nil {
		t.Errorf("a task that does not exist reads as %v, %v; want nil, nil", task, err)
	}
}

// Why counts at most queue.WhyCounted tasks ahead of a task, and says
// "or more" past it: the count is a read every viewer of a queue's page
// starts, and on the development server it reads each task it counts.
func TestWhyCountsUpToItsBound(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 4, queue.SortFIFO)
	for _, n := range []int{queue.WhyCounted, queue.WhyCounted + 5} {
		docs := make([]any, n-1)
		for i := range docs {
			docs[i] = bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}, {Key: "parameters", Value: bson.D{}}}
		}
		if n > queue.WhyCounted {
			docs = docs[:n-queue.WhyCounted] // the rest are there from the round before
		}
		dentest.Insert(t, db.Collection("tasks"), docs...)
		last := dentest.TaskWith(t, db, qid, bson.D{})
		task, err := queue.NewStore(db).Task(ctx, last)
		if err != nil || task == nil {
			t.Fatalf("read task %s: %v, %v", last.Hex(), task, err)
		}
		now := time.Now()
		f := &queue.Facts{Now: now, DeadAfter: time.Minute, Queues: map[bson.ObjectID]queue.Queue{qid: mustQueue(t, s, qid)},
			Nodes: []queue.NodeDoc{{Name: "a", Timestamp: now, Queues: []queue.NodeQueue{{ID: qid.Hex()}}}}}
		reasons, err := s.Why(ctx, f, *task)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("after the %d queued before it (fifo)", n-1)
		if n-1 > queue.WhyCounted {
			want = fmt.Sprintf("after the %d or more queued before it (fifo)", queue.WhyCounted)
		}
		if len(reasons) != 1 || !strings.HasSuffix(reasons[0].Text, want) {
			t.Errorf("%d tasks before it: reasons %v, want one ending %q", n-1, reasons, want)
		}
	}
}

// A task became ready at the latest of its creation (ctime, else its
// _id's time), its start_after, and the end of its last run.
func TestReadyAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	id := bson.NewObjectIDFromTimestamp(t0.Add(-time.Hour))
	at := func(d time.Duration) bson.DateTime { return bson.NewDateTimeFromTime(t0.Add(d)) }
	for _, tc := range []struct {
		name   string
		fields bson.D
		want   time.Time
	}{
		{"no ctime: its _id's time", nil, t0.Add(-time.Hour)},
		{"ctime", bson.D{{Key: "ctime", Value: at(0)}}, t0},
		{"start_after later", bson.D{{Key: "ctime", Value: at(0)}, {Key: queue.FieldStartAfter, Value: at(time.Minute)}}, t0.Add(time.Minute)},
		{"start_after earlier", bson.D{{Key: "ctime", Value: at(0)}, {Key: queue.FieldStartAfter, Value: at(-time.Minute)}}, t0},
		{"retried after its last run", bson.D{{Key: "ctime", Value: at(0)}, {Key: queue.FieldStartAfter, Value: at(time.Minute)},
			{Key: queue.FieldHistory, Value: bson.A{bson.D{{Key: "ended", Value: at(time.Second)}}, bson.D{{Key: "ended", Value: at(time.Hour)}}}}}, t0.Add(time.Hour)},
		{"its last run ended before", bson.D{{Key: "ctime", Value: at(0)},
			{Key: queue.FieldHistory, Value: bson.A{bson.D{{Key: "ended", Value: at(-time.Minute)}}}}}, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := append(bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: bson.NewObjectID()}, {Key: "status", Value: queue.StatusQueued},
				{Key: "node", Value: queue.Unclaimed}, {Key: "parameters", Value: bson.D{}}}, tc.fields...)
			task, err := queue.ParseTask(mustRaw(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := queue.ReadyAt(*task); !got.Equal(tc.want) {
				t.Fatalf("ReadyAt = %s, want %s", got, tc.want)
			}
		})
	}
}
