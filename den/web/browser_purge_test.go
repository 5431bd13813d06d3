package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// In Chromium, logged in, the task list's Purge these asks with the count
// of the ended tasks it matches, and deletes them once confirmed; the
// queued tasks stay.
func TestBrowserBulkPurge(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	db, _, queued, ended := bulkTasks(t)
	srv := serve(t, db, testToken)
	ctx, do := browser(t, bin)
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/tasks%3Fqueue%3Dbulk"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("bulk-purge")))
	do("purge, asked", chromedp.Click(chromedp.ID("bulk-purge")), chromedp.WaitVisible(chromedp.ID("bulk-confirm")))
	if txt := pageText(t, ctx, "#bulk-confirm"); !strings.Contains(txt, "This will purge 1 ended task") || !strings.Contains(txt, "for good") {
		t.Errorf("the confirmation says %q", txt)
	}
	if dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ended}}) != 1 {
		t.Fatal("the first step purged already")
	}
	do("purge, confirmed", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("bulk-done")))
	if txt := pageText(t, ctx, "#bulk-done"); !strings.Contains(txt, "Purged 1 of 1") {
		t.Errorf("after purging: %q", txt)
	}
	if dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ended}}) != 0 || dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: queued}}}}) != 3 {
		t.Error("purge removed the wrong tasks")
	}
}
