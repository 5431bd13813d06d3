package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// A real node runs a queue of one task at a time: one task succeeded, one
// failed, one keeps running, two wait. Headless Chromium opens the queue
// from the overview, logged in, and sees why the two wait (the node is at
// the queue's limit) and the pause button; pausing from the page comes
// back to it, paused, with the resume button. With DEN_WEB_SCREENSHOTS it
// saves queue-page.png.
func TestBrowserQueuePage(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "shell-jobs", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	ids := dentest.Tasks(t, db, qid,
		bson.D{{Key: "shell", Value: "echo hello from den"}},
		bson.D{{Key: "shell", Value: "echo cannot open input.csv >&2; exit 3"}},
		bson.D{{Key: "shell", Value: "echo started; exec sleep 600"}})
	startNode(t, db, "web-node")
	dentest.WaitStatus(t, db, ids[0], 1)
	dentest.WaitStatus(t, db, ids[1], 2)
	dentest.WaitStatus(t, db, ids[2], 0)
	dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "echo later"}}, bson.D{{Key: "shell", Value: "echo later still"}})
	srv := serve(t, db, testToken)

	ctx, do := browser(t, bin)
	text := func(sel string) string { t.Helper(); return pageText(t, ctx, sel) }
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`tr.queue[data-queue="shell-jobs"]`)))
	do("open the queue from the overview", chromedp.Click(chromedp.CSS(`tr.queue[data-queue="shell-jobs"] a.queue-link`)),
		chromedp.WaitVisible(chromedp.ID("queue-name")), chromedp.WaitVisible(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.CSS(`li.why[data-code="full"]`)))
	if why := text(`li.why`); !strings.Contains(why, "web-node") {
		t.Errorf("the why line %q does not name the node at its limit", why)
	}
	if rate := text("#rate"); rate != "50%" {
		t.Errorf("failure rate %q, want 50%% (1 of 2 ended)", rate)
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "queue-page.png"), 1200)
	}
	do("pause the queue from its page", chromedp.EmulateViewport(1200, 900), chromedp.Click(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.ID("resume")), chromedp.WaitVisible(chromedp.ID("paused")),
		chromedp.WaitVisible(chromedp.CSS(`li.why[data-code="paused"]`)))
}
