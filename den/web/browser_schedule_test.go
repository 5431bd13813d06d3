package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// In Chromium, logged in, the schedules page pauses and resumes a
// schedule, runs it now (landing on the task it inserted) and deletes it
// after its confirmation page.
func TestBrowserScheduleActions(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	f := newFixture(t)
	if _, err := queue.NewStore(f.db).AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "nightly", Queue: f.queue, Cron: "0 2 * * *"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, f.db, testToken)
	ctx, do := browser(t, bin)
	row := `tr.schedule[data-schedule="nightly"]`
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/schedules"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(row+" button.pause")))
	do("pause", chromedp.Click(chromedp.CSS(row+" button.pause")), chromedp.WaitVisible(chromedp.CSS(row+" button.resume")))
	if st := pageText(t, ctx, row+` td[data-label="State"]`); st != "paused" {
		t.Errorf("state after pause %q", st)
	}
	do("resume", chromedp.Click(chromedp.CSS(row+" button.resume")), chromedp.WaitVisible(chromedp.CSS(row+" button.pause")))
	do("run now", chromedp.Click(chromedp.CSS(row+" button.run")), chromedp.WaitVisible(chromedp.ID("task")))
	if msg := pageText(t, ctx, "body"); !strings.Contains(msg, "The schedule's task is inserted") {
		t.Errorf("run now's page does not say what it did:\n%s", msg)
	}
	do("delete, asked", chromedp.Navigate(srv.URL+"/schedules"), chromedp.WaitVisible(chromedp.CSS(row+" button.delete")),
		chromedp.Click(chromedp.CSS(row+" button.delete")), chromedp.WaitVisible(chromedp.ID("confirm-text")))
	n, err := f.db.Collection("schedules").CountDocuments(dentest.Context(t), map[string]any{})
	if err != nil || n != 1 {
		t.Fatalf("the confirmation page deleted already: %d schedules (%v)", n, err)
	}
	do("delete, confirmed", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.CSS("p.muted")))
	if body := pageText(t, ctx, "body"); !strings.Contains(body, "The schedule is deleted") || strings.Contains(body, `nightly`) {
		t.Errorf("after delete:\n%s", body)
	}
}
