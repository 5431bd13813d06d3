package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's runs counted by time cost one bulkWrite however many there
// are, and the document holds at most one count per bucket; added up
// from several writes (several nodes), the quantiles read back from it
// are those of all the runs.
func TestStatsTimeBucketsStayBounded(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	var mu sync.Mutex
	var commands []string
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		commands = append(commands, e.CommandName)
	}}
	cl, err := mongo.Connect(options.Client().ApplyURI(dentest.URI()).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Disconnect(context.Background()) })
	store := queue.NewStore(cl.Database(db.Name()))
	qid := bson.NewObjectID()
	at := time.Date(2026, 1, 5, 12, 20, 10, 0, time.UTC)
	for node := range 2 {
		runs, waits := queue.NewDurations(), queue.NewDurations()
		for i := range 10_000 {
			runs.Add(float64(i%1000) / 10) // 0 to 99.9 s, evenly
			waits.Add(float64(node))
		}
		mu.Lock()
		commands = nil
		mu.Unlock()
		if err := store.AddStats(ctx, []queue.QueueStat{{Queue: qid, Name: "q", At: at, Succeeded: 10_000, RunTimes: runs, WaitTimes: waits}}, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(commands) != 1 || commands[0] != "update" {
			t.Errorf("10,000 runs written with %v, want one update (the bulkWrite)", commands)
		}
		mu.Unlock()
	}
	points, err := store.Stats(ctx, queue.StatsQuery{Step: time.Minute, Since: at.Add(-time.Hour), Queue: qid})
	if err != nil || len(points) != 1 {
		t.Fatalf("%d points, %v", len(points), err)
	}
	p := points[0]
	if len(p.RunMs) > len(queue.DurationBounds)+1 || len(p.WaitMs) != 2 {
		t.Errorf("the document holds %d run counts and %d wait counts", len(p.RunMs), len(p.WaitMs))
	}
	runs := p.RunTimes()
	p50, _ := runs.Quantile(0.5)
	p95, _ := runs.Quantile(0.95)
	if runs.Total() != 20_000 || p50 < 45 || p50 > 55 || p95 < 85 || p95 > 105 {
		t.Errorf("read back: %d runs, p50 %.1f s, p95 %.1f s; want 20,000, about 50 and 95", runs.Total(), p50, p95)
	}
	if w, _ := p.WaitTimes().Quantile(0.75); w < 0.7 || w > 1 {
		t.Errorf("waits of 0 and 1 s: p75 %.2f s", w)
	}
}
