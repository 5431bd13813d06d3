package queue_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// RunningAll counts the claimed and running tasks of every queue by queue
// and node, and Running answers per queue (all nodes), per queue and node,
// and per node (all queues); queued and ended tasks are not counted, and
// a queue or node with none is 0. NodeTasks lists a node's claimed and
// running tasks, its name matched as stored and never as a pattern.
func TestRunningByQueueAndNode(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	stores := queue.NewStore(db)
	store := stores
	ctx := dentest.Context(t)
	a := dentest.Queue(t, db, "a", "P", 5, "fifo")
	b := dentest.Queue(t, db, "b", "P", 5, "fifo")
	idle := dentest.Queue(t, db, "idle", "P", 5, "fifo")
	ta := dentest.Tasks(t, db, a, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	tb := dentest.Tasks(t, db, b, bson.D{}, bson.D{}, bson.D{})
	dentest.Tasks(t, db, idle, bson.D{})
	now := time.Now()
	// a: n1 claims one and runs one, n2 runs one; one queued, one ended on n1.
	dentest.Claim(t, db, ta[0], "n1")
	startRun(t, db, stores, ta[1], "n1", now)
	startRun(t, db, stores, ta[2], "n2", now)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ta[4]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: "n1"}, {Key: "status", Value: queue.StatusSucceeded}}}})
	// b: n1 runs one, n3 claims one, one queued.
	startRun(t, db, stores, tb[0], "n1", now)
	dentest.Claim(t, db, tb[1], "n3")

	r, err := store.RunningAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"queue a", r.Queue(a), 3},
		{"queue b", r.Queue(b), 2},
		{"queue idle", r.Queue(idle), 0},
		{"an unknown queue", r.Queue(bson.NewObjectID()), 0},
		{"a on n1", r.Node(a, "n1"), 2},
		{"a on n2", r.Node(a, "n2"), 1},
		{"a on n3", r.Node(a, "n3"), 0},
		{"b on n3", r.Node(b, "n3"), 1},
		{"idle on n1", r.Node(idle, "n1"), 0},
		{"n1 in all", r.NodeTotal("n1"), 3},
		{"n2 in all", r.NodeTotal("n2"), 1},
		{"n3 in all", r.NodeTotal("n3"), 1},
		{"an unknown node", r.NodeTotal("n4"), 0},
	} {
		if c.got != c.want {
			t.Errorf("running tasks of %s: %d, want %d", c.what, c.got, c.want)
		}
	}

	for _, c := range []struct {
		node any
		want []bson.ObjectID
	}{
		{"n1", []bson.ObjectID{ta[0], ta[1], tb[0]}},
		{"n3", []bson.ObjectID{tb[1]}},
		{"n4", nil},
		{bson.Regex{Pattern: "n.*"}, nil},
	} {
		tasks, err := store.NodeTasks(ctx, c.node)
		if err != nil {
			t.Fatal(err)
		}
		got := map[bson.ObjectID]bool{}
		for _, task := range tasks {
			got[task.ID] = true
			if task.Parameters != nil || task.Raw.Lookup("stdout").Type != 0 {
				t.Errorf("NodeTasks(%v) read the parameters or output of task %s", c.node, task.ID.Hex())
			}
		}
		if len(got) != len(c.want) || len(tasks) != len(c.want) {
			t.Errorf("NodeTasks(%v) = %d tasks, want %v", c.node, len(tasks), c.want)
		}
		for _, id := range c.want {
			if !got[id] {
				t.Errorf("NodeTasks(%v) left out task %s", c.node, id.Hex())
			}
		}
	}
}

// An operator reads every queue: those that can be queues, and apart,
// those that cannot, with why.
func TestOperatorReadsQueues(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	a := dentest.Queue(t, db, "a", "P", 2, "lifo")
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "_id", Value: "by hand"}, {Key: "name", Value: "odd"}, {Key: "constructor", Value: "P"}})
	good, bad, err := store.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(good) != 1 || good[0].ID != a || good[0].Name != "a" || good[0].MaxThreads != 2 || good[0].Sort != "lifo" {
		t.Errorf("queues %+v, want a alone", good)
	}
	if len(bad) != 1 || bad[0].Reason == nil {
		t.Errorf("malformed queues %+v, want the one whose _id is a string", bad)
	}
	if q, err := store.QueueDoc(ctx, bson.NewObjectID()); err != nil || q != nil {
		t.Errorf("QueueDoc of no queue: %v, %v; want nil", q, err)
	}
}

// A census's Age is how long before now it was made.
func TestCensusAge(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	made := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if _, err := store.MakeCensus(ctx, "test", func() time.Time { return made }); err != nil {
		t.Fatal(err)
	}
	c, err := store.ReadCensus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Age(made.Add(90 * time.Second)); got != 90*time.Second {
		t.Errorf("Age 90 s after it was made: %v", got)
	}
	if got := c.Age(made); got != 0 {
		t.Errorf("Age when it was made: %v", got)
	}
}
