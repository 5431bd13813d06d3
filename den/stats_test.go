package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// Two nodes run a queue's tasks and write the stats collection: their
// completions add up (succeeded and failed apart, with their runs timed)
// in every step's documents, each node writes its own sample, the
// backlog of every queue that has one is sampled, and documents past
// retention are deleted.
func TestNodesWriteStats(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "charted", demo.Name, 3, "fifo")
	stats := db.Collection(queue.StatsCollection)
	old := time.Now().Add(-queue.StatsRetention - time.Hour).Truncate(time.Hour)
	dentest.Insert(t, stats, bson.D{{Key: "_id", Value: "old"}, {Key: "kind", Value: "queue"}, {Key: "queue", Value: qid}, {Key: "step", Value: 3600}, {Key: "t", Value: old}})
	// A queue no node serves still has its backlog sampled.
	idle := dentest.Queue(t, db, "unserved", "no such plugin", 1, "fifo")
	dentest.Tasks(t, db, idle, bson.D{{Key: "commands", Value: "a"}}, bson.D{{Key: "commands", Value: "a"}})
	// A queue with nothing to do costs nothing.
	empty := dentest.Queue(t, db, "empty", demo.Name, 1, "fifo")

	var params []bson.D
	for i := range 12 {
		cmd := "a"
		if i%4 == 0 {
			cmd = "c" // fails
		}
		params = append(params, bson.D{{Key: "commands", Value: cmd}, {Key: "noreport", Value: true}})
	}
	dentest.Tasks(t, db, qid, params...)
	ma, mb := metrics.New(nil), metrics.New(nil)
	a := startNode(t, db, "stats-a", func(c *den.Config) { c.Metrics = ma })
	b := startNode(t, db, "stats-b", func(c *den.Config) { c.Metrics = mb })
	// A runner reports the end to its node after it wrote it: wait for
	// the nodes to have heard of every end.
	dentest.Eventually(t, 2*time.Minute, "the nodes hearing of every task's end", func() bool {
		n := 0.0
		for _, m := range []*metrics.Metrics{ma, mb} {
			fams, err := m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fams {
				if f.GetName() == "den_task_completions_total" {
					for _, s := range f.GetMetric() {
						n += s.GetCounter().GetValue()
					}
				}
			}
		}
		return n == 12
	})
	a.Stop() // each writes what it has not written yet as it stops
	b.Stop()

	store := queue.NewStore(db)
	ranByA := dentest.CountTasks(t, db, bson.D{{Key: "node", Value: "stats-a"}, {Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}})
	for _, step := range queue.StatsSteps {
		points, err := store.Stats(ctx, queue.StatsQuery{Step: step, Since: time.Now().Add(-2 * time.Hour), Kind: queue.StatQueue, Queue: qid})
		if err != nil {
			t.Fatal(err)
		}
		var succeeded, failed, runs int64
		var secs float64
		runTimes, waits := queue.NewDurations(), queue.NewDurations()
		for _, p := range points {
			succeeded += p.Succeeded
			failed += p.Failed
			runs += p.Runs
			secs += p.RunSeconds
			runTimes.AddAll(p.RunTimes())
			waits.AddAll(p.WaitTimes())
			if p.Name != "charted" {
				t.Errorf("step %s: queue named %q in %+v", step, p.Name, p)
			}
		}
		if succeeded != 9 || failed != 3 || runs != 12 || secs <= 0 {
			t.Errorf("step %s: succeeded %d, failed %d, runs %d taking %.3fs; want 9, 3, 12 and some time", step, succeeded, failed, runs, secs)
		}
		// Every run counted by how long it ran and its task waited, in
		// buckets, from which quantiles are read.
		p95, ok := waits.Quantile(0.95)
		if runTimes.Total() != 12 || waits.Total() != 12 || !ok || p95 <= 0 || p95 > 120 {
			t.Errorf("step %s: %d runs and %d waits counted by time (wait p95 %.3fs), want 12 and 12", step, runTimes.Total(), waits.Total(), p95)
		}
		backlog, err := store.Stats(ctx, queue.StatsQuery{Step: step, Since: time.Now().Add(-2 * time.Hour), Kind: queue.StatQueue, Queue: idle})
		if err != nil {
			t.Fatal(err)
		}
		if len(backlog) == 0 || backlog[len(backlog)-1].Queued != 2 {
			t.Errorf("step %s: the unserved queue's backlog is %+v, want 2 queued", step, backlog)
		}
		checkNodeStats(t, store, step, ranByA)
	}
	if n := dentest.Count(t, stats, bson.D{{Key: "queue", Value: empty}}); n != 0 {
		t.Errorf("%d stats documents of a queue that never had a task", n)
	}
	if n := dentest.Count(t, stats, bson.D{{Key: "_id", Value: "old"}}); n != 0 {
		t.Errorf("a stats document past retention was kept")
	}
}

// checkNodeStats checks the node documents of step: both nodes wrote
// their sample, and they counted the 12 tasks they finished between them,
// stats-a ranByA of them.
func checkNodeStats(t *testing.T, store *queue.Store, step time.Duration, ranByA int64) {
	t.Helper()
	ctx := dentest.Context(t)
	nodes, err := store.Stats(ctx, queue.StatsQuery{Step: step, Since: time.Now().Add(-2 * time.Hour), Kind: queue.StatNode})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var finished, byA int64
	for _, p := range nodes {
		seen[p.Node] = seen[p.Node] || p.Sampled
		finished += p.Succeeded + p.Failed
		if p.Node == "stats-a" {
			byA += p.Succeeded + p.Failed
		}
	}
	if !seen["stats-a"] || !seen["stats-b"] {
		t.Errorf("step %s: node samples of %v, want stats-a and stats-b", step, seen)
	}
	// Each node counts the tasks it finished, however short: they
	// add up to the queue's.
	if finished != 12 || byA != ranByA {
		t.Errorf("step %s: the nodes counted %d finished tasks (stats-a %d), want 12 (stats-a %d)", step, finished, byA, ranByA)
	}
}
