package web_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's page charts its throughput, backlog, and its tasks' wait and
// run times (p50, p95 per step, read from the time buckets nodes count),
// and says what they add up to over the range; one find of the stats.
func TestQueuePageCharts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "resize", "Disbatch::Plugin::Command", 2, "fifo")
	runs, waits := queue.NewDurations(), queue.NewDurations()
	for range 10 {
		runs.Add(0.3)
	}
	runs.Add(40)
	for range 11 {
		waits.Add(2)
	}
	at := time.Date(2026, 1, 5, 12, 20, 10, 0, time.UTC)
	if err := queue.NewStore(db).AddStats(ctx, []queue.QueueStat{
		{Queue: qid, Name: "resize", At: at, Succeeded: 9, Failed: 2, RunTimes: runs, WaitTimes: waits, Backlog: true, Queued: 5, Running: 2},
	}, nil); err != nil {
		t.Fatal(err)
	}
	view := countedViews(t, db)
	body, commands := view("/queues/resize?range=15m")
	// 12:16 to 12:30: 12:20 is the fifth point.
	for _, c := range []struct{ chart, series, want string }{
		{"finished per minute", "succeeded", "0,0,0,0,9,0,0,0,0,0,0,0,0,0,-"},
		{"backlog", "count_todo", "0,0,0,0,5,0,0,0,0,0,0,0,0,0,-"},
		{"run time (s)", "p50", "-,-,-,-,0.25,-,-,-,-,-,-,-,-,-,-"},
		{"run time (s)", "p95", "-,-,-,-,37.753,-,-,-,-,-,-,-,-,-,-"},
		{"wait before start (s)", "p50", "-,-,-,-,1.732,-,-,-,-,-,-,-,-,-,-"},
	} {
		if got := strings.Join(seriesValues(t, body, c.chart, c.series), ","); got != c.want {
			t.Errorf("%s, %s: %s, want %s", c.chart, c.series, got, c.want)
		}
	}
	sum := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(body[strings.Index(body, `<p id="range-sum">`):], "")
	sum = sum[:strings.Index(sum, "\n")]
	if want := "last 15 minutes: 9 succeeded, 2 failed (0.7/min); waited p50 1.73 s, p95 1.97 s; ran p50 0.25 s, p95 37.8 s (over 11 timed runs"; !strings.HasPrefix(sum, want) {
		t.Errorf("the range's sum says %q, want %q…", sum, want)
	}
	if commands["find "+queue.StatsCollection] != 1 {
		t.Errorf("the queue page read the stats with %v", commands)
	}
	if !strings.Contains(body, `<a class="range" data-range="week" href="/queues/`+qid.Hex()+`?range=week">`) {
		t.Error("no link to the queue's charts over a week")
	}
}

// A node's page charts the tasks it finished as it counted them (a
// hundred short tasks show, however the samples missed them) and the
// tasks it held with its load, as sampled.
func TestNodePageCharts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	at := func(min int) time.Time { return time.Date(2026, 1, 5, 12, min, 10, 0, time.UTC) }
	if err := store.AddStats(ctx, nil, []queue.NodeStat{{Node: "n1", At: at(20), Running: 0, Load: 0.5}}); err != nil {
		t.Fatal(err)
	}
	if err := store.AddStats(ctx, nil, []queue.NodeStat{
		{Node: "n1", At: at(20), Succeeded: 97, Failed: 3, NoSample: true},
		{Node: "n1", At: at(21), Succeeded: 1, NoSample: true},
		{Node: "n2", At: at(20), Succeeded: 5, NoSample: true},
	}); err != nil {
		t.Fatal(err)
	}
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "n1"}, {Key: "timestamp", Value: chartAt}, {Key: "queues", Value: bson.A{}}})
	view := countedViews(t, db)
	body, _ := view("/nodes/n1?range=15m")
	for _, c := range []struct{ chart, series, want string }{
		{"n1: finished per minute", "succeeded", "0,0,0,0,97,1,0,0,0,0,0,0,0,0,-"},
		{"n1: finished per minute", "failed", "0,0,0,0,3,0,0,0,0,0,0,0,0,0,-"},
		// Sampled at 12:20; 12:21 holds only what it finished: no sample.
		{"n1: tasks running and load", "tasks running", "-,-,-,-,0,-,-,-,-,-,-,-,-,-,-"},
		{"n1: tasks running and load", "load (1 min)", "-,-,-,-,0.5,-,-,-,-,-,-,-,-,-,-"},
	} {
		if got := strings.Join(seriesValues(t, body, c.chart, c.series), ","); got != c.want {
			t.Errorf("%s, %s: %s, want %s", c.chart, c.series, got, c.want)
		}
	}
	if !strings.Contains(body, `<strong id="sum-finished">98</strong> succeeded, <strong id="sum-failed">3</strong> failed`) {
		t.Errorf("the node page does not say it finished 98 and failed 3")
	}
	// The overview charts the same.
	body, _ = view("/?range=15m")
	if got := strings.Join(seriesValues(t, body, "n2: finished per minute", "succeeded"), ","); got != "0,0,0,0,5,0,0,0,0,0,0,0,0,0,-" {
		t.Errorf("the overview's n2 finished: %s", got)
	}
}
