package web_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	text := func(sel string) string { t.Helper(); return pageText(t, ctx, sel) }
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

// Headless Chromium walks a queue's task list two at a time with the
// older and newer links, seeing each task once, newest first, and then
// searches it by a parameter in the form's Parameter field.
func TestBrowserTaskListPagesAndSearch(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "pages", "Disbatch::Plugin::Command", 0, "fifo")
	var params []bson.D
	for i := range 5 {
		params = append(params, bson.D{{Key: "day", Value: fmt.Sprint(i)}})
	}
	ids := dentest.Tasks(t, db, q, params...)
	srv := serve(t, db, "")

	ctx, do := browser(t, bin)
	shown := func() []string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.task")].map(r => r.dataset.task)`))
		if err != nil {
			t.Fatalf("read the rows: %v", err)
		}
		return out
	}
	// follow clicks the link sel and waits for the page it leads to.
	follow := func(what, sel string) {
		t.Helper()
		href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+sel+`').href`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		do(what, chromedp.Click(chromedp.CSS(sel)))
		dentest.Eventually(t, 30*time.Second, what, func() bool {
			at, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState == "complete" ? location.href : ""`))
			return err == nil && at == href
		})
	}
	var seen []string
	do("first page", chromedp.Navigate(srv.URL+"/tasks?queue=pages&limit=2"), chromedp.WaitVisible(chromedp.ID("tasklist")))
	seen = append(seen, shown()...)
	for range 2 {
		follow("older page", `a[rel="next"]`)
		seen = append(seen, shown()...)
	}
	var want []string
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i].Hex())
	}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("pages showed %v, want %v (newest first, each once)", seen, want)
	}
	follow("back to a newer page", `a[rel="prev"]`)
	if got := shown(); strings.Join(got, ",") != strings.Join(want[2:4], ",") {
		t.Errorf("the newer page shows %v, want %v", got, want[2:4])
	}
	do("search by a parameter", chromedp.Navigate(srv.URL+"/tasks?queue=pages"), chromedp.WaitVisible(chromedp.CSS(`input[name="param"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="param"]`), "day=3"), chromedp.Submit(chromedp.CSS(`input[name="param"]`)))
	dentest.Eventually(t, 30*time.Second, "the search's page", func() bool {
		at, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState == "complete" ? location.search : ""`))
		return err == nil && strings.Contains(at, "param=day%3D3")
	})
	if got := shown(); len(got) != 1 || got[0] != ids[3].Hex() {
		t.Errorf("searching day=3 shows %v, want only %s", got, ids[3].Hex())
	}
}
