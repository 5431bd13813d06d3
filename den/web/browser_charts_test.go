package web_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// seedDayOfStats writes a day of history of a queue "images" and nodes
// worker01 and worker02, as nodes would have written it: a point every
// quarter hour, and every minute for the last hour.
func seedDayOfStats(t *testing.T, db *mongo.Database) {
	t.Helper()
	ctx0 := dentest.Context(t)
	store := queue.NewStore(db)
	now := time.Now()
	busy := dentest.Queue(t, db, "images", "MyCorp::Plugin::Resize", 4, "fifo")
	sample := func(at time.Time, per float64) {
		h := float64(at.Hour()) + float64(at.Minute())/60
		wave := 1 + math.Sin(h/24*2*math.Pi*2)
		ok := int64(math.Round(per * (3 + 4*wave)))
		bad := int64(0)
		if at.Minute()%7 == 0 {
			bad = int64(math.Round(per * 2))
		}
		backlog := int64(math.Round(40 * wave))
		runs, waits := queue.NewDurations(), queue.NewDurations()
		for i := range ok + bad {
			// Most runs near 20 s, one in ten three times as long; waits
			// grow with the backlog.
			spread := 0.7 + 0.6*float64(i%10)/10
			if i%10 == 9 {
				spread = 3
			}
			runs.Add((20 + 5*wave) * spread)
			waits.Add((1 + float64(backlog)/4) * spread)
		}
		if err := store.AddStats(ctx0, []queue.QueueStat{
			{Queue: busy, Name: "images", At: at, Succeeded: ok, Failed: bad, Runs: ok + bad, RunSeconds: float64(ok+bad) * (20 + 5*wave),
				RunTimes: runs, WaitTimes: waits, Backlog: true, Queued: backlog, Running: 4 + int64(2*wave)},
		}, []queue.NodeStat{
			{Node: "worker01", At: at, Running: 4, Load: 2 + wave, Succeeded: ok / 2},
			{Node: "worker02", At: at, Running: int64(2 + 2*wave), Load: 1 + wave/2, Succeeded: ok - ok/2, Failed: bad},
		}); err != nil {
			t.Fatal(err)
		}
	}
	for at := now.Add(-24 * time.Hour).Truncate(15 * time.Minute); at.Before(now.Add(-time.Hour)); at = at.Add(15 * time.Minute) {
		sample(at, 15)
	}
	for at := now.Add(-time.Hour).Truncate(time.Minute); at.Before(now.Add(-time.Minute)); at = at.Add(time.Minute) {
		sample(at, 1)
	}

}

// runShellJobs runs a real node's tasks in a queue "shell-jobs": five
// succeed, two fail. It returns their ids once the node stopped.
func runShellJobs(t *testing.T, db *mongo.Database) []bson.ObjectID {
	t.Helper()
	qid := dentest.Queue(t, db, "shell-jobs", command.Name, 2, "fifo")
	var params []bson.D
	for i := range 7 {
		shell := "sleep 0.2; echo ok"
		if i%3 == 2 {
			shell = "sleep 0.1; exit 3"
		}
		params = append(params, bson.D{{Key: "shell", Value: shell}})
	}
	ids := dentest.Tasks(t, db, qid, params...)
	node := nodetest.Start(t, db, "web-node")
	dentest.Eventually(t, 2*time.Minute, "the node's tasks ending", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}}) == 7
	})
	node.Stop() // it writes the completions it has not written yet
	return ids
}

// A real node runs tasks and writes their completions to the stats
// collection; the test adds a day of a busy queue's and two nodes' history
// before it. Headless Chromium shows the charts over the last hour and the
// day, on a desktop and on a phone (no sideways scrolling), and a task's
// run time against its queue's. With DEN_WEB_SCREENSHOTS it saves
// charts.png, charts-day.png, charts-phone.png and runtime.png there.
func TestBrowserCharts(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	seedDayOfStats(t, db)
	ids := runShellJobs(t, db)
	srv := serve(t, db, "")

	ctx, do := browser(t, bin)
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return s
	}
	// sum adds up what a chart's series draws, as the browser has it.
	sum := func(chart, series string) string {
		return eval(`String([...document.querySelectorAll('figure[data-chart="` + chart + `"] g[data-series="` + series + `"]')].flatMap(g => g.dataset.values.split(",")).filter(v => v !== "-").reduce((a, v) => a + Number(v), 0))`)
	}
	visible := func(sel string) string {
		return eval(`(() => { const r = document.querySelector('` + sel + `')?.getBoundingClientRect(); return r ? r.width + "x" + r.height : "none" })()`)
	}
	save := func(name, sel string) {
		t.Helper()
		dir := os.Getenv(envScreenshots)
		if dir == "" {
			return
		}
		b, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}

	do("open the overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
	if got := sum("shell-jobs: finished per minute", "succeeded") + "/" + sum("shell-jobs: finished per minute", "failed"); got != "5/2" {
		t.Errorf("the real node's completions drawn over the last hour: %s succeeded/failed, want 5/2", got)
	}
	if got := sum("images: finished per minute", "succeeded"); got == "0" {
		t.Error("the last hour of queue images draws nothing")
	}
	for _, sel := range []string{`figure[data-chart="images: backlog"] polyline`, `figure[data-chart="worker02: tasks running and load"] polyline`, `figure[data-chart="web-node: finished per minute"] svg`} {
		if v := visible(sel); v == "none" || strings.HasPrefix(v, "0x") {
			t.Errorf("%s is not shown (%s)", sel, v)
		}
	}
	save("charts.png", "#charts")

	do("show the last day", chromedp.Click(chromedp.CSS(`a.range[href="/?range=day"]`)), chromedp.WaitVisible(chromedp.CSS(`strong.range`)))
	if got := eval(`document.querySelector("strong.range").textContent`); got != "last day" {
		t.Errorf("the range selector shows %q", got)
	}
	if got := eval(`String(document.querySelector('figure[data-chart="images: finished per 15 minutes"] g[data-series="succeeded"]').dataset.values.split(",").length)`); got != "96" {
		t.Errorf("a day has %s points, want 96", got)
	}
	save("charts-day.png", "#charts")

	do("narrow the viewport", chromedp.EmulateViewport(390, 844), chromedp.Navigate(srv.URL+"/?range=day"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
	if eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`) != "true" {
		t.Errorf("on a 390px screen the charts are %spx wide", eval(`String(document.documentElement.scrollWidth)`))
	}
	save("charts-phone.png", `.chart-pair[data-queue="images"]`)

	do("open a task", chromedp.EmulateViewport(1200, 900), chromedp.Navigate(srv.URL+"/tasks/"+ids[0].Hex()), chromedp.WaitVisible(chromedp.CSS(`#runtime svg.chart`)))
	if got := sum("Run time: this task and its queue mean, per hour", "queue mean run (s)"); got == "0" {
		t.Error("the task page draws no run time of its queue")
	}
	save("runtime.png", "#runtime")
}
