package den_test

import (
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// A queue's rate limit holds across nodes: with rate_limit {starts: 2,
// per: 10} and two nodes serving it, at most 2 of 6 tasks have started 8 s
// after the queue opens, no 3 starts fall in any 8 s, and all 6 run, each
// once.
func TestRateLimitHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	// The queue is closed (maxthreads 0) until both nodes serve it.
	qid := dentest.Queue(t, db, "limited", sleepPlugin, 0, "fifo",
		bson.E{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}}})
	dentest.Tasks(t, db, qid, sleepTasks(6, 300)...)
	startNode(t, db, "n1")
	startNode(t, db, "n2")
	dentest.Eventually(t, time.Minute, "both nodes list the queue", func() bool {
		return countNodesServing(t, db, qid) == 2
	})
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: qid}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 10}}}}); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	started := func() int64 {
		raw, err := db.Collection("concurrency").FindOne(ctx, bson.D{{Key: "_id", Value: "sequence"}}).Raw()
		if err != nil {
			return 0
		}
		n, _ := raw.Lookup("now").AsInt64OK()
		return n
	}
	for time.Since(opened) < 8*time.Second {
		if n := started(); n > 2 {
			t.Fatalf("%d tasks started %s after the queue opened; rate limit 2 per 10 s", n, time.Since(opened).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	at8 := started()
	dentest.Eventually(t, 45*time.Second, "all 6 tasks ended", func() bool { return countDone(t, db)() == 6 })
	t.Logf("%d started 8 s after the queue opened; all 6 ended %s after it", at8, time.Since(opened).Round(100*time.Millisecond))

	// Each task ran once; no 3 runs started within 8 s of each other.
	cur, err := db.Collection("runs").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	ran := map[bson.ObjectID]int{}
	nodes := map[string]int{}
	for cur.Next(ctx) {
		starts = append(starts, cur.Current.Lookup("started").Time())
		ran[cur.Current.Lookup("task_id").ObjectID()]++
		node, _ := cur.Current.Lookup("node").StringValueOK()
		nodes[node]++
	}
	if len(starts) != 6 || len(ran) != 6 {
		t.Fatalf("%d runs of %d tasks, want 6 of 6", len(starts), len(ran))
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 2; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-2]); gap < 8*time.Second {
			t.Errorf("runs %d and %d started %s apart: 3 starts within 8 s under a limit of 2 per 10 s", i-2, i, gap.Round(time.Millisecond))
		}
	}
	t.Logf("runs by node: %v", nodes)
	if q := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: 1}}}}); q != 0 {
		t.Errorf("%d tasks did not succeed", q)
	}
}

// countNodesServing is how many node documents list queue qid.
func countNodesServing(t *testing.T, db *mongo.Database, qid bson.ObjectID) int64 {
	t.Helper()
	n, err := db.Collection("nodes").CountDocuments(dentest.Context(t), bson.D{{Key: "queues.id", Value: qid.Hex()}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
