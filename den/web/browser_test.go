package web_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// envScreenshots names a directory to write the screenshots docs/web.md shows to
// (status.png, phone.png); the test writes them only when asked.
const envScreenshots = "DEN_WEB_SCREENSHOTS"

// browser starts a headless Chromium of 1200×900 (its start has no
// deadline; what the test does with it then has 3 minutes), stopped when
// the test ends, and returns its context and a helper that runs steps in
// it, failing the test with what was being done.
func browser(t *testing.T, bin string) (context.Context, func(what string, steps ...chromedp.Action[chromedp.Void])) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1200, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx, func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// chromium finds Debian's Chromium, or says why the test cannot run.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("DEN_TEST_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("no Chromium here (apt-get install chromium, or DEN_TEST_CHROMIUM=/path): the status page cannot be checked in a browser")
	return ""
}

// A real node runs a task that finishes with output and one that keeps
// running; headless Chromium checks that the pages show the queue, the
// node, the running task and the finished task's output, that a narrow
// (phone) screen needs no sideways scrolling, that an action without the
// token is refused, and that with the token it works and the running
// task's page follows it to its end.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	finished, failed, running, self := startBrowserNode(t, db)
	srv := serve(t, db, testToken)

	ctx, do := browser(t, bin)
	text := func(sel string) string { t.Helper(); return pageText(t, ctx, sel) }
	eval := func(js string) bool {
		t.Helper()
		b, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return b
	}
	// poll waits until js is true; the page may reload meanwhile (an
	// evaluation cut short by a navigation is tried again).
	poll := func(what, js string) {
		t.Helper()
		dentest.Eventually(t, time.Minute, what, func() bool {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
			return err == nil && ok
		})
	}

	checkOverviewPages(t, ctx, do, srv.URL, finished, failed, self)

	// The task list, filtered to what runs.
	do("list running tasks", chromedp.Navigate(srv.URL+"/tasks?status=claimed,running"), chromedp.WaitVisible(chromedp.CSS("#tasklist")))
	list := text("#tasklist")
	if !strings.Contains(list, running.Hex()) || strings.Contains(list, finished.Hex()) || !strings.Contains(list, "0 running") {
		t.Errorf("running tasks list: %q", list)
	}

	// The finished task's page shows its output.
	do("open the finished task", chromedp.Navigate(srv.URL+"/tasks/"+finished.Hex()), chromedp.WaitVisible(chromedp.ID("stdout")))
	if got := text("#stdout"); got != "hello from den\n" {
		t.Errorf("stdout shows %q", got)
	}
	if got := text("#stderr"); got != "a warning\n" {
		t.Errorf("stderr shows %q", got)
	}
	if got := text("#status"); got != "1 succeeded" {
		t.Errorf("status shows %q", got)
	}

	// The running task, not logged in: no action offered, and one forced
	// from the page is refused.
	do("open the running task", chromedp.Navigate(srv.URL+"/tasks/"+running.Hex()), chromedp.WaitVisible(chromedp.ID("status")))
	if !eval(`document.getElementById("cancel") === null && document.getElementById("task").dataset.live === "1"`) {
		t.Error("the running task's page offers cancel without the token, or does not follow the task")
	}
	// Live output: what the running program printed shows while it runs.
	poll("the running task's output, live", `(document.getElementById("stdout") || {}).textContent === "started\n"`)
	if st, _ := dentest.Task(t, db, running).Lookup("status").AsInt64OK(); st != 0 {
		t.Fatalf("the task is no longer running (status %d): its output was not shown live", st)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch(location.pathname + "/cancel", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 403 {
		t.Errorf("cancel without the token: %d %v, want 403", status, err)
	}
	if cancelFlag(t, db, running) {
		t.Fatal("a cancel without the token was written")
	}

	// Log in with the token: cancel is offered and works; the page follows
	// the task until it has ended, with the output it stored.
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/tasks/"+running.Hex()), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("cancel")))
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("cancel"))); err != nil {
		t.Fatalf("cancel the running task: %v", err)
	}
	poll("the page to say cancel was requested", `(document.querySelector("p.message") || {}).textContent.includes("Cancel requested")`)
	dentest.WaitStatus(t, db, running, -5)
	poll("the page to show the task cancelled", `(document.getElementById("status") || {}).textContent === "-5 cancelled"`)
	poll("the stored output", `(document.getElementById("stdout") || {}).textContent === "started\n"`)
	poll("the page to reload once the task ended", `document.getElementById("task") && document.getElementById("task").dataset.live === undefined`)
	if eval(`document.getElementById("cancel") !== null`) || !eval(`document.getElementById("retry") !== null`) {
		t.Error("the cancelled task's page offers cancel, or not retry")
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "task.png"), 1200)
	}

	// The overview reloads itself: a queue created meanwhile appears
	// without navigating.
	do("open the overview again", chromedp.EmulateViewport(1200, 900), chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr.queue[data-queue="shell-jobs"]`)))
	if !eval(`document.querySelector('tr.queue[data-queue="late"]') === null`) {
		t.Fatal("queue late shown before it exists")
	}
	dentest.Queue(t, db, "late", command.Name, 1, "fifo")
	poll("the overview to show a new queue by itself", `document.querySelector('tr.queue[data-queue="late"]') !== null`)
}

// nodeSelf is what a node says of itself in its document.
type nodeSelf struct {
	Version   string `bson:"version"`
	Resources struct {
		CPUs     int    `bson:"cpus"`
		DiskPath string `bson:"disk_path"`
	} `bson:"resources"`
}

// startBrowserNode starts node web-node on db with three tasks of queue
// shell-jobs (one finished, one failed, one running) and three of a queue
// whose plugin it does not have, and returns the first three's ids once
// they are so, with what the node says of itself.
func startBrowserNode(t *testing.T, db *mongo.Database) (finished, failed, running bson.ObjectID, self nodeSelf) {
	t.Helper()
	qid := dentest.Queue(t, db, "shell-jobs", command.Name, 2, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	ids := dentest.Tasks(t, db, qid,
		bson.D{{Key: "shell", Value: "echo hello from den; echo a warning >&2"}},
		bson.D{{Key: "shell", Value: "echo cannot open input.csv >&2; exit 3"}},
		bson.D{{Key: "shell", Value: "echo started; exec sleep 600"}})
	finished, failed, running = ids[0], ids[1], ids[2]
	// A queue whose plugin this node does not have: its tasks wait.
	other := dentest.Queue(t, db, "resize", "MyCorp::Plugin::Resize", 4, "fifo")
	dentest.Tasks(t, db, other, bson.D{{Key: "image", Value: "a.png"}}, bson.D{{Key: "image", Value: "b.png"}}, bson.D{{Key: "image", Value: "c.png"}})
	startNode(t, db, "web-node")
	dentest.WaitStatus(t, db, finished, 1)
	dentest.WaitStatus(t, db, failed, 2)
	dentest.WaitStatus(t, db, running, 0)
	// The node describes itself and its machine with its heartbeat.
	dentest.Eventually(t, time.Minute, "the node document has its resources", func() bool {
		err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "web-node"}}).Decode(&self)
		return err == nil && self.Resources.CPUs > 0 && self.Resources.DiskPath != "" && self.Version != ""
	})
	return finished, failed, running, self
}

// checkOverviewPages checks the overview on a desktop screen (the queue
// with one running and one done, the node with its resources), then the
// overview and a task's page on a phone-sized one, and goes back to the
// desktop screen.
func checkOverviewPages(t *testing.T, ctx context.Context, do func(string, ...chromedp.Action[chromedp.Void]), srvURL string, finished, failed bson.ObjectID, self nodeSelf) {
	t.Helper()
	text := func(sel string) string { t.Helper(); return pageText(t, ctx, sel) }
	fits := func() bool {
		t.Helper()
		b, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
		if err != nil {
			t.Fatalf("evaluate the page's width: %v", err)
		}
		return b
	}
	// The overview: the queue with one running and one done, the node with
	// its resources.
	do("open the overview", chromedp.Navigate(srvURL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr.queue[data-queue="shell-jobs"]`)))
	if got := text(`tr.queue[data-queue="shell-jobs"] a.running`); got != "1" {
		t.Errorf("queue shows %q running, want 1", got)
	}
	if got := text(`tr.queue[data-queue="shell-jobs"] td[data-label="Done"]`); got != "1" {
		t.Errorf("queue shows %q done, want 1", got)
	}
	if got := text(`tr.queue[data-queue="shell-jobs"] td[data-label="Failed"]`); got != "1" {
		t.Errorf("queue shows %q failed, want 1", got)
	}
	if got := text(`tr.queue[data-queue="resize"] td[data-label="Todo"]`); got != "3" {
		t.Errorf("queue resize shows %q todo, want 3", got)
	}
	if got := text(`#failures`); !strings.Contains(got, failed.Hex()) || !strings.Contains(got, "exited with code 3") {
		t.Errorf("recent failures %q lack the failed task", got)
	}
	node := text(`tr.node[data-node="web-node"]`)
	for _, want := range []string{"web-node", fmt.Sprintf("/ %d CPUs", self.Resources.CPUs), "GiB of", self.Resources.DiskPath, self.Version, "shell-jobs 1"} {
		if !strings.Contains(node, want) {
			t.Errorf("node row %q lacks %q", node, want)
		}
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "status.png"), 1200)
	}

	// A phone-sized screen: cards instead of wide tables, nothing wider
	// than the screen.
	do("narrow the viewport", chromedp.EmulateViewport(390, 844), chromedp.Navigate(srvURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr.queue[data-queue="shell-jobs"]`)))
	if !fits() {
		w, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		t.Errorf("on a 390px screen the overview is %dpx wide", w)
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "phone.png"), 0)
	}
	do("open the finished task on the phone", chromedp.Navigate(srvURL+"/tasks/"+finished.Hex()), chromedp.WaitVisible(chromedp.ID("stdout")))
	if !fits() {
		t.Error("on a 390px screen the task page is wider than the screen")
	}
	do("back to a desktop screen", chromedp.EmulateViewport(1200, 900))

}

// shot saves a screenshot as PNG: of the viewport, or, given a width, of
// the whole page at that width (the viewport fitted to the page's height).
// pageText is the text of the element sel on the browser's page; a
// missing element fails the test.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func shot(t *testing.T, ctx context.Context, path string, width int64) {
	t.Helper()
	if width > 0 {
		h, err := chromedp.Run(ctx, chromedp.Evaluate[int64](`Math.ceil(document.body.getBoundingClientRect().height)`))
		if err == nil {
			err = chromedp.Do(ctx, chromedp.EmulateViewport(width, h))
		}
		if err != nil {
			t.Errorf("fit the viewport for %s: %v", path, err)
		}
	}
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("screenshot %s: %v", path, err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(b))
}
