package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// Headless Chromium, logged in, lists one queue's tasks, asks to cancel
// them, is shown how many that is, and confirms: the three queued tasks
// are cancelled (their cancel request set), the other queue's task is not. With DEN_WEB_SCREENSHOTS
// it saves task-list.png (the list with its bulk buttons) and
// bulk-confirm.png.
func TestBrowserBulkCancel(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "nightly", "Disbatch::Plugin::Command", 0, "fifo")
	other := dentest.Queue(t, db, "other", "Disbatch::Plugin::Command", 0, "fifo")
	ids := dentest.Tasks(t, db, q, bson.D{{Key: "shell", Value: "make report day=1"}}, bson.D{{Key: "shell", Value: "make report day=2"}}, bson.D{{Key: "shell", Value: "make report day=3"}})
	kept := dentest.Tasks(t, db, other, bson.D{{Key: "shell", Value: "true"}})
	srv := serve(t, db, testToken)

	ctx, do := browser(t, bin)
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/tasks?queue=nightly"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("bulk-cancel")))
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "task-list.png"), 1200)
	}
	do("ask to cancel the listed tasks", chromedp.Click(chromedp.ID("bulk-cancel")), chromedp.WaitVisible(chromedp.ID("bulk-confirm")))
	confirm := text("#bulk-confirm")
	if !strings.Contains(confirm, "cancel 3 tasks") || !strings.Contains(confirm, ids[2].Hex()) {
		t.Errorf("confirmation %q does not say 3 tasks up to %s", confirm, ids[2].Hex())
	}
	for _, id := range ids {
		if cancelFlag(t, db, id) {
			t.Errorf("task %s cancelled before the confirmation", id.Hex())
		}
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		shot(t, ctx, filepath.Join(dir, "bulk-confirm.png"), 1200)
	}
	do("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("bulk-done")))
	done := text("#bulk-done")
	if !strings.Contains(done, "Cancelled 3 of 3") {
		t.Errorf("after confirming: %q, want Cancelled 3 of 3", done)
	}
	// No node runs here: a cancelled queued task keeps its status until a
	// node's sweep ends it, and carries the cancel request meanwhile.
	for _, id := range ids {
		if !cancelFlag(t, db, id) {
			t.Errorf("task %s not cancelled", id.Hex())
		}
	}
	if cancelFlag(t, db, kept[0]) {
		t.Errorf("the other queue's task was cancelled")
	}
}
