package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// In Chromium, after its tasks are archived as den task archive does, the
// task list's "archived" box lists the archive, and its link opens the
// archived task's page with its output.
func TestBrowserArchivedTasks(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	f := newFixture(t)
	ctx0 := dentest.Context(t)
	store := queue.NewStore(f.db)
	ended, err := store.RetireCandidates(ctx0, queue.RetireFilter{TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{f.queue}, Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.RetireTasks(ctx0, ended, queue.RetireArchive); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, f.db, testToken)
	ctx, do := browser(t, bin)
	row := `tr.task[data-task="` + f.done.Hex() + `"]`
	do("list the archive", chromedp.Navigate(srv.URL+"/tasks"), chromedp.WaitVisible(chromedp.ID("archived")),
		chromedp.Click(chromedp.ID("archived")), chromedp.Submit(chromedp.ID("archived")),
		chromedp.WaitVisible(chromedp.CSS(row)))
	if h := pageText(t, ctx, "h1"); h != "Archived tasks" {
		t.Errorf("heading %q, want Archived tasks", h)
	}
	do("open the archived task", chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.CSS("dd#archived")))
	if out := pageText(t, ctx, "pre#stdout"); !strings.Contains(out, "hello ünïcode") {
		t.Errorf("the archived task's stdout shows %q", out)
	}
}
