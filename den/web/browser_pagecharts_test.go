package web_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Headless Chromium shows a queue's page charts (a day of a busy queue,
// and the 7 tasks a real node just ran), a node's page charts, and the
// overview over 15 minutes reloading itself as new stats come: the range
// stays, and what finished grows without a click. With
// DEN_WEB_SCREENSHOTS it saves queue-charts.png, queue-charts-young.png,
// node-charts.png, task-took.png and charts-15m.png there.
func TestBrowserPageCharts(t *testing.T) {
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
	// values are what a chart's series draws, as the browser has it:
	// "count/sum" of its values.
	values := func(chart, series string) string {
		return eval(`(() => { const v = document.querySelector('figure[data-chart="` + chart + `"] g[data-series="` + series + `"]').dataset.values.split(",").filter(v => v !== "-").map(Number); return v.length + "/" + v.reduce((a, x) => a + x, 0) })()`)
	}
	text := func(sel string) string { return eval(`document.querySelector('` + sel + `')?.textContent ?? "none"`) }
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

	do("open a busy queue's page over a day", chromedp.Navigate(srv.URL+"/queues/images?range=day"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
	for _, c := range [][2]string{{"run time (s)", "p95"}, {"wait before start (s)", "p50"}, {"finished per 15 minutes", "succeeded"}} {
		if got := values(c[0], c[1]); got == "0/0" {
			t.Errorf("%s, %s draws nothing over a day", c[0], c[1])
		}
	}
	if got := eval(`String(document.querySelectorAll('figure[data-chart="backlog"] line.tick').length)`); got != "8" {
		t.Errorf("the day's axis has %s ticks, want 8 (every 3 hours)", got)
	}
	save("queue-charts.png", "#charts")

	do("open the young queue's page over 15 minutes", chromedp.Navigate(srv.URL+"/queues/shell-jobs?range=15m"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
	if got := text("#sum-finished") + "/" + text("#sum-failed"); got != "5/2" {
		t.Errorf("the young queue's page says %s succeeded/failed, want 5/2", got)
	}
	if got := values("run time (s)", "p50"); strings.HasPrefix(got, "0/") {
		t.Errorf("the young queue's run time p50 is drawn as %s, want a point or two", got)
	}
	save("queue-charts-young.png", "#charts")

	do("open the node's page", chromedp.Navigate(srv.URL+"/nodes/web-node?range=15m"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
	// Summed: the minute under way may be blank or not, whenever the
	// node wrote its last completions.
	sum := func(v string) string { return v[strings.Index(v, "/")+1:] }
	if got := sum(values("web-node: finished per minute", "succeeded")) + " " + sum(values("web-node: finished per minute", "failed")); got != "5 2" {
		t.Errorf("the node's finished tasks are drawn as %s succeeded and failed, want 5 2", got)
	}
	save("node-charts.png", "#charts")

	do("open a task's page", chromedp.Navigate(srv.URL+"/tasks/"+ids[0].Hex()), chromedp.WaitVisible(chromedp.CSS(`#took`)))
	// It slept 0.2 s; a loaded machine may take seconds more.
	if got := text("#took"); !regexp.MustCompile(`^\d+(\.\d+)? s$`).MatchString(strings.TrimSpace(got)) {
		t.Errorf("the task's run time reads %q, want seconds", got)
	}
	save("task-took.png", "dl.facts")

	do("show the overview's last 15 minutes", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)),
		chromedp.Click(chromedp.CSS(`a.range[data-range="15m"]`)), chromedp.WaitVisible(chromedp.CSS(`strong.range[data-range="15m"]`)))
	before := values("shell-jobs: finished per minute", "succeeded")
	var q struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "name", Value: "shell-jobs"}}).Decode(&q); err != nil {
		t.Fatal(err)
	}
	qid := q.ID
	if err := queue.NewStore(db).AddStats(dentest.Context(t), []queue.QueueStat{
		{Queue: qid, Name: "shell-jobs", At: time.Now().Add(-3 * time.Minute), Succeeded: 40},
	}, nil); err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(40 + 5)
	dentest.Eventually(t, 30*time.Second, "the overview reloading itself", func() bool {
		v := values("shell-jobs: finished per minute", "succeeded")
		return len(v) > 3 && v[len(v)-len(want):] == want
	})
	if got := text("strong.range"); got != "last 15 minutes" || eval(`location.search`) != "?range=15m" {
		t.Errorf("after reloading itself the page shows %q at %s", got, eval(`location.search`))
	}
	t.Logf("shell-jobs finished over 15 minutes: %s before, %s after", before, values("shell-jobs: finished per minute", "succeeded"))
	save("charts-15m.png", `.chart-pair[data-queue="shell-jobs"]`)
}
