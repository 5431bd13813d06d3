package web_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// liveRequests counts the page's requests to /live so far (resource
// timing: every fetch the page made).
const liveRequests = `performance.getEntriesByType("resource").filter(e => new URL(e.name).pathname === "/live").length`

// The overview, a queue's page and the task list update live in
// Chromium: a task inserted with the driver shows in the counts and in
// the list without a navigation (a variable the test sets on the window
// survives, and the page has had one navigation), and the scroll
// position stays. A page whose form was edited
// holds the change (it says so) and keeps what was typed until the form
// is put back; a hidden tab asks nothing, and asks at once when shown.
func TestBrowserLiveUpdates(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "livequeue", "P", 1, "fifo")
	dentest.Tasks(t, db, q, bson.D{{Key: "n", Value: 1}})
	srv := serveWith(t, web.Options{DB: db, Log: zaptest.NewLogger(t), Refresh: time.Second, CountsAge: time.Second})
	ctx, do := browser(t, bin)
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(`+js+`)`))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return s
	}
	poll := func(what, js string) {
		t.Helper()
		dentest.Eventually(t, 30*time.Second, what, func() bool {
			s, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
			return err == nil && s
		})
	}
	// open opens a page and marks its window: a navigation loses the mark.
	open := func(path, waitFor string) {
		t.Helper()
		do("open "+path, chromedp.Navigate(srv.URL+path), chromedp.WaitVisible(chromedp.CSS(waitFor)))
		eval(`window.denMark = "` + path + `"`)
	}
	same := func(path string) string {
		return `window.denMark === "` + path + `" && performance.getEntriesByType("navigation").length === 1`
	}
	tasks := 1
	insert := func() bson.ObjectID {
		t.Helper()
		tasks++
		return dentest.Tasks(t, db, q, bson.D{{Key: "n", Value: tasks}})[0]
	}

	// The overview's count of waiting tasks.
	todo := `document.querySelector('tr.queue[data-queue="livequeue"] td[data-label="Todo"]').textContent`
	open("/", `tr.queue[data-queue="livequeue"]`)
	if got := eval(todo); got != "1" {
		t.Fatalf("the overview counts %s waiting tasks, want 1", got)
	}
	insert()
	poll("the overview to count 2 waiting tasks by itself", same("/")+` && `+todo+` === "2"`)

	// A queue's page: its count of queued tasks and its newest tasks.
	queued := `document.querySelector('tr.count[data-status="-2"] td[data-label="Tasks"]').textContent`
	open("/queues/livequeue", `tr.count[data-status="-2"]`)
	if got := eval(queued); got != strconv.Itoa(tasks) {
		t.Fatalf("the queue's page counts %s queued tasks, want %d", got, tasks)
	}
	id := insert()
	poll("the queue's page to count and list the new task by itself", same("/queues/livequeue")+` && `+queued+` === "`+strconv.Itoa(tasks)+`"`+
		` && document.querySelector('tr.task[data-task="`+id.Hex()+`"]') !== null`)

	// The task list, scrolled down a little.
	list := "/tasks?queue=" + q.Hex()
	open(list, "#tasklist")
	do("make the page tall and scroll it", chromedp.EmulateViewport(1200, 300))
	eval(`window.scrollTo(0, 120), window.scrollY`)
	y := eval(`window.scrollY`)
	id = insert()
	row := `document.querySelector('tr.task[data-task="` + id.Hex() + `"]') !== null`
	poll("the task list to show the new task by itself", same(list)+` && `+row)
	t.Logf("scrolled to %s before the update (0: the scroll is not checked)", y)
	if got := eval(`window.scrollY`); got != y {
		t.Errorf("the update moved the page from %s to %s", y, got)
	}
	do("restore the viewport", chromedp.EmulateViewport(1200, 900))

	// A form edited (the parameter filter typed in, then left) holds the
	// change, and what was typed stays.
	do("type a filter, then leave it", chromedp.SendKeys(chromedp.CSS(`input[name="param"]`), "n=1"), chromedp.Blur(chromedp.CSS(`input[name="param"]`)))
	id = insert()
	row = `document.querySelector('tr.task[data-task="` + id.Hex() + `"]') !== null`
	poll("the page to say it holds a change", same(list)+` && document.getElementById("live").dataset.held === "1"`+
		` && getComputedStyle(document.querySelector("header .refresh"), "::after").content.includes("held")`)
	if eval(row) != "false" || eval(`document.querySelector('input[name="param"]').value`) != "n=1" {
		t.Fatal("the update replaced a form someone was filling in")
	}
	eval(`document.querySelector('input[name="param"]').value = ""`)
	poll("the held change to show once the form is put back", same(list)+` && `+row+` && document.getElementById("live").dataset.held === undefined`)

	// A hidden tab asks nothing; shown again, it asks at once.
	eval(`Object.defineProperty(document, "hidden", {configurable: true, get: () => true}), document.dispatchEvent(new Event("visibilitychange"))`)
	before := eval(liveRequests)
	// Four intervals in which nothing must be asked: a request that does
	// not come has no event to wait for.
	time.Sleep(4 * time.Second)
	if after := eval(liveRequests); after != before {
		t.Errorf("a hidden tab asked /live %d times more", atoi(t, after)-atoi(t, before))
	}
	id = insert()
	eval(`Object.defineProperty(document, "hidden", {configurable: true, get: () => false}), document.dispatchEvent(new Event("visibilitychange"))`)
	row = `document.querySelector('tr.task[data-task="` + id.Hex() + `"]') !== null`
	poll("the shown tab to ask at once and update", same(list)+` && `+row)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
