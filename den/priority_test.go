package den_test

import (
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// runsInOrder waits for n runs and returns them in the order they started
// (the sleep plugin's seq, taken from one counter as each run starts).
func runsInOrder(t *testing.T, db *mongo.Database, n int) []bson.Raw {
	t.Helper()
	dentest.Eventually(t, 2*time.Minute, "all tasks run", func() bool { return dentest.Count(t, db.Collection("runs"), bson.D{}) == int64(n) })
	cur, err := db.Collection("runs").Find(dentest.Context(t), bson.D{}, options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.Raw
	for cur.Next(dentest.Context(t)) {
		out = append(out, slices.Clone(cur.Current))
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pausedWithPriorities makes a paused fifo queue with low tasks without
// priority, then high tasks of priority 10 inserted after them, each
// sleeping ms.
func pausedWithPriorities(t *testing.T, db *mongo.Database, low, high, ms int) (qid bson.ObjectID, lows, highs []bson.ObjectID) {
	t.Helper()
	store := queue.NewStore(db)
	qid = dentest.Queue(t, db, "prio", sleepPlugin, 1, "fifo")
	if o, err := store.PauseQueue(dentest.Context(t), qid, "test", time.Now()); err != nil || o != queue.PauseDone {
		t.Fatalf("pause: %v, %v", o, err)
	}
	lows = dentest.Tasks(t, db, qid, sleepTasks(low, ms)...)
	for i := range high {
		highs = append(highs, dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: ms}, {Key: "i", Value: 100 + i}}, bson.E{Key: queue.FieldPriority, Value: 10}))
	}
	return qid, lows, highs
}

// The check: in a paused fifo queue, three tasks of priority 10
// inserted after three without; resumed, the three of priority 10 run
// first, in their fifo order, then the three others, in theirs.
func TestPriorityRunsFirst(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid, lows, highs := pausedWithPriorities(t, db, 3, 3, 0)
	startNode(t, db, "n")
	// The node has seen the queue paused before it is resumed.
	dentest.Eventually(t, time.Minute, "node document", func() bool { return dentest.Count(t, db.Collection("nodes"), bson.D{}) == 1 })
	if o, err := queue.NewStore(db).ResumeQueue(dentest.Context(t), qid); err != nil || o != queue.PauseDone {
		t.Fatalf("resume: %v, %v", o, err)
	}
	want := append(slices.Clone(highs), lows...)
	for i, r := range runsInOrder(t, db, len(want)) {
		if got := r.Lookup("task_id").ObjectID(); got != want[i] {
			t.Fatalf("run %d was %s (high %d, low %d), want %s", i, got.Hex(), indexOf(highs, got), indexOf(lows, got), want[i].Hex())
		}
	}
}

// Two nodes working one queue, one task at a time each, respect the
// priorities together: no task without priority starts before every task
// of priority 10 has started. The tasks of priority 10 sleep 1.5 s, so a
// node frees its slot only that long after its claim: a runner that takes
// less than that to start its task cannot let a later claim start first,
// and the check holds whatever the order the two nodes' claims interleave
// in. Both nodes take part.
func TestPriorityWithTwoNodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid, lows, highs := pausedWithPriorities(t, db, 4, 0, 0)
	for i := range 4 {
		highs = append(highs, dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 1500}, {Key: "i", Value: 100 + i}}, bson.E{Key: queue.FieldPriority, Value: int64(10)}))
	}
	startNode(t, db, "a")
	startNode(t, db, "b")
	dentest.Eventually(t, time.Minute, "node documents", func() bool { return dentest.Count(t, db.Collection("nodes"), bson.D{}) == 2 })
	if o, err := queue.NewStore(db).ResumeQueue(dentest.Context(t), qid); err != nil || o != queue.PauseDone {
		t.Fatalf("resume: %v, %v", o, err)
	}
	runs := runsInOrder(t, db, len(lows)+len(highs))
	nodes := map[string]int{}
	for i, r := range runs {
		id := r.Lookup("task_id").ObjectID()
		nodes[r.Lookup("node").StringValue()]++
		if (i < len(highs)) != slices.Contains(highs, id) {
			t.Fatalf("run %d was %s (high %d, low %d): the %d tasks of priority 10 must start first", i, id.Hex(), indexOf(highs, id), indexOf(lows, id), len(highs))
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("runs by node %v: both nodes should have worked the queue", nodes)
	}
}
