package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// A queue's page, by name or by id, shows its counts by status, its
// settings, its newest tasks, its failure rate over its last ended tasks
// and why its waiting tasks wait; the overview links to it; an unknown
// queue is a 404 page that names it.
func TestQueuePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	c := client(nil)
	_, overview := get(t, c, srv.URL+"/")
	if !strings.Contains(overview, `href="/queues/`+f.queue.Hex()+`"`) {
		t.Errorf("the overview does not link the queue to its page:\n%s", overview)
	}
	for _, ref := range []string{"resize", f.queue.Hex()} {
		code, body := get(t, c, srv.URL+"/queues/"+ref)
		if code != 200 {
			t.Fatalf("/queues/%s: %d\n%s", ref, code, body)
		}
		for _, want := range []string{
			`<span id="queue-name">resize</span>`,
			"Disbatch::Plugin::Command", "2 per node",
			`data-status="1"`, `data-status="2"`, `data-status="0"`, `data-status="-2"`,
			// 1 succeeded and 1 failed of the 2 ended: 50%.
			`<strong id="rate">50%</strong> of the last 2 ended tasks failed (1)`,
			// n1 is live but lists no queue: no node serves it.
			`<li class="why" data-code="no_node_serves">`,
			`href="/tasks/` + f.waiting.Hex() + `"`, `href="/tasks/` + f.done.Hex() + `"`,
			`href="/nodes/n1"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/queues/%s lacks %q:\n%s", ref, want, body)
			}
		}
		if strings.Contains(body, "/pause") {
			t.Errorf("/queues/%s shows the pause button to a visitor without the token", ref)
		}
	}
	code, body := get(t, c, srv.URL+"/queues/nosuch")
	if code != 404 || !strings.Contains(body, `no queue is named &#34;nosuch&#34;`) {
		t.Errorf("/queues/nosuch: %d, want 404 naming it:\n%s", code, body)
	}

	// Paused from its page, the queue's page comes back, paused.
	resp := postResp(t, c, srv.URL+"/queues/"+f.queue.Hex()+"/pause", url.Values{"token": {testToken}, "back": {"queue"}}, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || !strings.HasPrefix(loc, "/queues/"+f.queue.Hex()+"?") {
		t.Fatalf("pause from the queue page: %d to %q, want 303 to the queue's page", resp.StatusCode, loc)
	}
	_, body = get(t, c, srv.URL+"/queues/resize")
	if !strings.Contains(body, `<span class="status paused" id="paused">paused`) || !strings.Contains(body, "resumes with: 2 per node") ||
		!strings.Contains(body, `<li class="why" data-code="paused">`) {
		t.Errorf("the paused queue's page:\n%s", body)
	}
}

// A queue or node whose name is markup is shown as text on its page, on
// the overview and on the 404 page of a name that does not exist.
func TestQueueAndNodePagesEscapeNames(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	const hostile = `<script>alert("q")</script>`
	qid := dentest.Queue(t, db, hostile, "Disbatch::Plugin::Command", 1, "fifo")
	dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}})
	srv := serve(t, db, "")
	c := client(nil)
	for _, u := range []string{"/", "/queues/" + url.PathEscape(hostile), "/queues/" + qid.Hex(),
		"/queues/" + url.PathEscape(hostile+"x"), "/nodes/" + url.PathEscape(hostile)} {
		code, body := get(t, c, srv.URL+u)
		if strings.Contains(body, "<script>alert") {
			t.Errorf("%s (%d) has the name as markup:\n%s", u, code, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(") {
			t.Errorf("%s (%d) does not show the name as text:\n%s", u, code, body)
		}
	}
	if code, _ := get(t, c, srv.URL+"/queues/"+url.PathEscape(hostile)); code != 200 {
		t.Errorf("the hostile queue's page by name: %d", code)
	}
	if code, _ := get(t, c, srv.URL+"/nodes/"+url.PathEscape(hostile)); code != 404 {
		t.Errorf("an unknown hostile node: %d, want 404", code)
	}
}

// A node's page shows its state as the overview decides it, its last
// heartbeat, its maxthreads and the tasks it holds; the overview and the
// queue's page link to it; an unknown node is a 404.
func TestNodePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, "")
	c := client(nil)
	_, overview := get(t, c, srv.URL+"/")
	if !strings.Contains(overview, `href="/nodes/n1"`) {
		t.Errorf("the overview does not link the node to its page")
	}
	code, body := get(t, c, srv.URL+"/nodes/n1")
	if code != 200 {
		t.Fatalf("/nodes/n1: %d\n%s", code, body)
	}
	for _, want := range []string{`<span id="node-name">n1</span>`, `>running</span>`, `<td id="maxthreads">none`,
		`data-task="` + f.running.Hex() + `"`, `<a href="/queues/` + f.queue.Hex() + `">resize</a>`, "pid 4242", "v1.2.3"} {
		if !strings.Contains(body, want) {
			t.Errorf("/nodes/n1 lacks %q:\n%s", want, body)
		}
	}
	for _, not := range []bson.ObjectID{f.done, f.gfs, f.waiting} {
		if strings.Contains(body, not.Hex()) {
			t.Errorf("/nodes/n1 lists task %s, which it does not hold", not.Hex())
		}
	}
	// Silent for longer than dead_node_after: dead, as on the overview.
	dentest.Update(t, f.db.Collection("nodes"), bson.D{{Key: "node", Value: "n1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "timestamp", Value: bson.DateTime(0)}}}})
	if _, body := get(t, c, srv.URL+"/nodes/n1"); !strings.Contains(body, `<span id="node-state" class="bad">dead</span>`) {
		t.Errorf("a silent node is not dead on its page:\n%s", body)
	}
	if code, body := get(t, c, srv.URL+"/nodes/ghost"); code != http.StatusNotFound || !strings.Contains(body, "no node named &#34;ghost&#34;") {
		t.Errorf("/nodes/ghost: %d, want 404 naming it:\n%s", code, body)
	}
}
