package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// In Chromium, logged in, a node's page quiets and resumes it, and
// forgets a dead node.
func TestBrowserNodeActions(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	f := newFixture(t)
	dentest.Insert(t, f.db.Collection("nodes"), bson.D{{Key: "node", Value: "old"}, {Key: "timestamp", Value: time.Now().Add(-time.Hour)}})
	srv := serve(t, f.db, testToken)
	ctx, do := browser(t, bin)
	do("log in", chromedp.Navigate(srv.URL+"/login?next=/nodes/n1"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("node-quiet")))
	do("quiet", chromedp.Click(chromedp.ID("node-quiet")), chromedp.WaitVisible(chromedp.ID("node-resume")), chromedp.WaitVisible(chromedp.ID("quiet")))
	if q := pageText(t, ctx, "#quiet"); !strings.Contains(q, "by den web") {
		t.Errorf("the quiet line says %q", q)
	}
	if mt := pageText(t, ctx, "#maxthreads"); mt != "quiet resumes: none" {
		t.Errorf("a quiet node's maxthreads shows %q", mt)
	}
	do("resume", chromedp.Click(chromedp.ID("node-resume")), chromedp.WaitVisible(chromedp.ID("node-quiet")))
	do("forget a dead node", chromedp.Navigate(srv.URL+"/nodes/old"), chromedp.WaitVisible(chromedp.ID("node-forget")),
		chromedp.Click(chromedp.ID("node-forget")), chromedp.WaitVisible(chromedp.ID("queues")))
	if dentest.Count(t, f.db.Collection("nodes"), bson.D{{Key: "node", Value: "old"}}) != 0 {
		t.Error("the dead node is still there")
	}
}
