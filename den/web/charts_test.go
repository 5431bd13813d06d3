package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
	"github.com/den-project/den/queue"
)

// chartAt is the fixed clock of the chart tests: half past noon.
var chartAt = time.Date(2026, 1, 5, 12, 30, 30, 0, time.UTC)

// serveAt starts the status page on db with the clock stopped at now.
func serveAt(t *testing.T, db *mongo.Database, now time.Time) *httptest.Server {
	t.Helper()
	h, err := web.New(web.Options{DB: db, Log: zaptest.NewLogger(t), Now: func() time.Time { return now }, CountsAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// seriesValues reads back the values a chart (by its title) draws for
// one series, from the SVG's data-values.
func seriesValues(t *testing.T, body, chart, series string) []string {
	t.Helper()
	i := strings.Index(body, `data-chart="`+chart+`"`)
	if i < 0 {
		t.Fatalf("no chart %q on the page", chart)
	}
	fig := body[i:]
	fig = fig[:strings.Index(fig, "</figure>")]
	m := regexp.MustCompile(`data-series="` + regexp.QuoteMeta(series) + `" data-values="([^"]*)"`).FindStringSubmatch(fig)
	if m == nil {
		t.Fatalf("chart %q has no series %q: %s", chart, series, fig)
	}
	return strings.Split(m[1], ",")
}

// countedViews serves the pages on db at chartAt and returns view, which
// gets a page (failing the test unless it is 200) and says which
// commands, by name and collection, the page view sent the server.
func countedViews(t *testing.T, db *mongo.Database) (view func(u string) (string, map[string]int)) {
	t.Helper()
	// Monitor the page's commands, to count them.
	var mu sync.Mutex
	commands := map[string]int{}
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		commands[e.CommandName+" "+coll]++
	}}
	cl, err := mongo.Connect(options.Client().ApplyURI(dentest.URI()).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Disconnect(context.Background()) })
	srv := serveAt(t, cl.Database(db.Name()), chartAt)
	c := client(nil)
	return func(u string) (string, map[string]int) {
		t.Helper()
		mu.Lock()
		clear(commands)
		mu.Unlock()
		code, body := get(t, c, srv.URL+u)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", u, code, body)
		}
		mu.Lock()
		defer mu.Unlock()
		return body, maps(commands)
	}
}

// seedResize writes what nodes would have of queue resize at 12:20 and
// 12:25: 3 succeeded and 1 failed with a backlog of 7 and 2, then 5
// succeeded with a backlog of 4 and 1, and node n1's sample.
func seedResize(t *testing.T, db *mongo.Database, qid bson.ObjectID) {
	t.Helper()
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	at := func(min int) time.Time { return time.Date(2026, 1, 5, 12, min, 10, 0, time.UTC) }
	if err := store.AddStats(ctx, []queue.QueueStat{
		{Queue: qid, Name: "resize", At: at(20), Succeeded: 3, Failed: 1, Backlog: true, Queued: 7, Running: 2},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := store.AddStats(ctx, []queue.QueueStat{
		{Queue: qid, Name: "resize", At: at(25), Succeeded: 5},
		{Queue: qid, Name: "resize", At: at(25), Backlog: true, Queued: 4, Running: 1},
	}, []queue.NodeStat{{Node: "n1", At: at(25), Running: 4, Load: 1.5}}); err != nil {
		t.Fatal(err)
	}
}

// The last 15 minutes are 15 points of a minute, the minute under way
// blank (nodes write it once it is over), with a tick every 5 minutes.
func TestChartsOverFifteenMinutes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "resize", "Disbatch::Plugin::Command", 2, "fifo")
	seedResize(t, db, qid)
	view := countedViews(t, db)
	body, _ := view("/?range=15m")
	if v := seriesValues(t, body, "resize: finished per minute", "succeeded"); strings.Join(v, ",") != "0,0,0,0,3,0,0,0,0,5,0,0,0,0,-" {
		t.Errorf("15 minutes: succeeded %v", v)
	}
	if v := seriesValues(t, body, "resize: backlog", "count_todo"); len(v) != 15 || v[4] != "7" || v[9] != "4" {
		t.Errorf("15 minutes: count_todo %v", v)
	}
	var ticks []string
	for _, m := range regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(body[strings.Index(body, `data-chart="resize: backlog"`):], -1)[:3] {
		ticks = append(ticks, m[1])
	}
	if strings.Join(ticks, " ") != "12:20 12:25 12:30" || !strings.Contains(body, `<strong class="range" data-range="15m">last 15 minutes</strong>`) {
		t.Errorf("15 minutes: ticks %v, or the range is not shown as chosen", ticks)
	}
}

// The overview draws, per queue, what finished (succeeded and failed apart)
// and the backlog, and per node its tasks and load, from the stats
// collection over the last hour, day or week; a page view costs the same
// commands with 3 tasks or 300, and reads the stats with one find.
func TestChartsDrawTheStats(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "resize", "Disbatch::Plugin::Command", 2, "fifo")
	seedResize(t, db, qid)

	// A document no node wrote is left out, not the page's end.
	dentest.Insert(t, db.Collection(queue.StatsCollection), bson.D{{Key: "_id", Value: "by hand"}, {Key: "kind", Value: "queue"},
		{Key: "queue", Value: qid}, {Key: "step", Value: 60}, {Key: "t", Value: time.Date(2026, 1, 5, 12, 21, 0, 0, time.UTC)}, {Key: "succeeded", Value: "many"}})

	view := countedViews(t, db)

	body, _ := view("/")
	// The last hour, a minute a point: 12:31 is the last, 12:20 the 50th.
	ok := seriesValues(t, body, "resize: finished per minute", "succeeded")
	bad := seriesValues(t, body, "resize: finished per minute", "failed")
	if len(ok) != 60 || ok[49] != "3" || ok[54] != "5" || bad[49] != "1" || ok[0] != "0" || bad[54] != "0" {
		t.Errorf("finished per minute: succeeded %v, failed %v", ok, bad)
	}
	// The backlog's count_todo, under its own name: not "queued", since
	// Disbatch's count_todo counts cancelled tasks too.
	queued := seriesValues(t, body, "resize: backlog", "count_todo")
	running := seriesValues(t, body, "resize: backlog", "running")
	if queued[49] != "7" || queued[54] != "4" || running[49] != "2" || running[54] != "1" {
		t.Errorf("backlog: queued %v, running %v", queued, running)
	}
	if v := seriesValues(t, body, "n1: tasks running and load", "tasks running"); v[54] != "4" {
		t.Errorf("node n1's tasks running: %v", v)
	}
	if v := seriesValues(t, body, "n1: tasks running and load", "load (1 min)"); v[54] != "1.5" {
		t.Errorf("node n1's load: %v", v)
	}
	if !strings.Contains(body, `<svg class="chart"`) || !strings.Contains(body, `href="/?range=week"`) {
		t.Errorf("no inline SVG chart or no range selector on the page")
	}

	// A day, a quarter of an hour a point: 12:30 is the last.
	body, _ = view("/?range=day")
	if v := seriesValues(t, body, "resize: finished per 15 minutes", "succeeded"); len(v) != 96 || v[94] != "8" || v[95] != "0" {
		t.Errorf("a day: succeeded %v", v)
	}
	// A week, an hour a point: 12:00 is the last.
	body, _ = view("/?range=week")
	if v := seriesValues(t, body, "resize: finished per hour", "succeeded"); len(v) != 168 || v[167] != "8" {
		t.Errorf("a week: succeeded %v", v)
	}
	if v := seriesValues(t, body, "resize: backlog", "count_todo"); v[167] != "4" {
		t.Errorf("a week: queued %v (the last sample of the hour)", v)
	}

	_, few := view("/")
	var params []bson.D
	for i := range 300 {
		params = append(params, bson.D{{Key: "i", Value: i}})
	}
	dentest.Tasks(t, db, qid, params...)
	_, many := view("/")
	if total(few) != total(many) || many["find "+queue.StatsCollection] != 1 {
		t.Errorf("a page view's commands: %v with 3 tasks, %v with 303; want as many, and one find of the stats", few, many)
	}

	// With many queues, the busiest are charted, and the page says how
	// many are not.
	for i := range 30 {
		dentest.Queue(t, db, fmt.Sprintf("quiet%02d", i), "Disbatch::Plugin::Command", 1, "fifo")
	}
	body, _ = view("/")
	seriesValues(t, body, "resize: finished per minute", "succeeded")
	if !strings.Contains(body, "1 quieter queues are not charted") || strings.Contains(body, `data-chart="quiet29: backlog"`) {
		t.Errorf("with 31 queues, the quietest is charted or not said to be left out")
	}
}

// The task page draws how long this task's runs took against its queue's
// mean run time per hour over the last week.
func TestTaskRunTimeChart(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "resize", "Disbatch::Plugin::Command", 2, "fifo")
	store := queue.NewStore(db)
	if err := store.AddStats(ctx, []queue.QueueStat{
		{Queue: qid, Name: "resize", At: chartAt.Add(-3 * time.Hour), Succeeded: 4, Runs: 4, RunSeconds: 80},
		{Queue: qid, Name: "resize", At: chartAt, Succeeded: 1, Runs: 2, RunSeconds: 5},
	}, nil); err != nil {
		t.Fatal(err)
	}
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: chartAt.Add(-30 * time.Second)},
		{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 1}, {Key: "started", Value: int64(1)},
			{Key: "host", Value: "h"}, {Key: "at", Value: chartAt.Add(-90 * time.Second)}}},
		{Key: "history", Value: bson.A{
			bson.D{{Key: "attempt", Value: 1}, {Key: "node", Value: "n1"}, {Key: "status", Value: 2},
				{Key: "started", Value: chartAt.Add(-10 * time.Minute)}, {Key: "ended", Value: chartAt.Add(-10*time.Minute + 2500*time.Millisecond)}},
			bson.D{{Key: "attempt", Value: 2}, {Key: "node", Value: "n1"}, {Key: "status", Value: 2},
				{Key: "started", Value: chartAt.Add(-8 * time.Minute)}, {Key: "ended", Value: chartAt.Add(-8*time.Minute + 125*time.Second)}},
		}}}}})
	srv := serveAt(t, db, chartAt)
	code, body := get(t, client(nil), srv.URL+"/tasks/"+id.Hex())
	if code != http.StatusOK {
		t.Fatalf("task page: %d", code)
	}
	title := "Run time: this task and its queue mean, per hour"
	mean := seriesValues(t, body, title, "queue mean run (s)")
	this := seriesValues(t, body, title, "this task (s)")
	if len(mean) != 168 || mean[164] != "20" || mean[167] != "2.5" || mean[0] != "-" || this[0] != "60" || this[167] != "60" {
		t.Errorf("run times: the queue's mean %v, this task %v", mean, this)
	}
	// Each run's time as a number: the last run's in the facts, the
	// earlier ones' in the history.
	if m := regexp.MustCompile(`<dd id="took">([^<]*?) *<`).FindStringSubmatch(body); m == nil || m[1] != "1 min 00 s" {
		t.Errorf("the task's run time says %q, want 1 min 00 s", m)
	}
	var took []string
	for _, m := range regexp.MustCompile(`class="num took">([^<]*)<`).FindAllStringSubmatch(body, -1) {
		took = append(took, m[1])
	}
	if strings.Join(took, "|") != "2.5 s|2 min 05 s" {
		t.Errorf("the history's run times are %q, want 2.5 s|2 min 05 s", took)
	}
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
