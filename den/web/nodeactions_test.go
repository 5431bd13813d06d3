package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// nodeDoc reads a node's document.
func nodeDoc(t *testing.T, db *mongo.Database, name string) bson.Raw {
	t.Helper()
	raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: name}}).Raw()
	if err != nil {
		t.Fatalf("node document of %s: %v", name, err)
	}
	return raw
}

// waitBeats waits until node name has written its document n times more.
func waitBeats(t *testing.T, db *mongo.Database, name string, n int) {
	t.Helper()
	for range n {
		before := nodeDoc(t, db, name).Lookup("timestamp").Time()
		dentest.Eventually(t, time.Minute, "node "+name+" writing its document", func() bool {
			return nodeDoc(t, db, name).Lookup("timestamp").Time().After(before)
		})
	}
}

// A real node is quieted through the action URL: the task it runs goes on
// to its end, and a task inserted once the node has read its quiet waits;
// resumed, the node runs it, and its maxthreads is as it was (none). The
// actions need the token and, with a cookie, the CSRF field.
func TestNodeQuietAndResume(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "jobs", command.Name, 2, "fifo")
	first := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "sleep 2; echo first"}})[0]
	startNode(t, db, "quiet-node")
	dentest.WaitStatus(t, db, first, 0)
	srv := serve(t, db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	jar, _ := loggedIn(t, srv.URL)
	if code := post(t, client(nil), srv.URL+"/nodes/quiet-node/quiet", nil, nil); code != 403 {
		t.Errorf("quiet without the token: %d, want 403", code)
	}
	if code := post(t, client(jar), srv.URL+"/nodes/quiet-node/quiet", nil, nil); code != 403 {
		t.Errorf("quiet with the cookie, without the CSRF field: %d, want 403", code)
	}
	if nodeDoc(t, db, "quiet-node").Lookup("quiet").Type != 0 {
		t.Fatal("a refused quiet quieted the node")
	}
	code, body := postBody(t, srv.URL+"/nodes/quiet-node/quiet", nil, bearer)
	if code != 200 || !strings.Contains(body, `"result":"node-quiet"`) || !strings.Contains(body, `"node":"quiet-node"`) {
		t.Fatalf("quiet: %d %s", code, body)
	}
	if mt, _ := nodeDoc(t, db, "quiet-node").Lookup("maxthreads").AsInt64OK(); mt != 0 {
		t.Errorf("a quiet node's maxthreads is %d, want 0", mt)
	}
	if code, body = postBody(t, srv.URL+"/nodes/quiet-node/quiet", nil, bearer); !strings.Contains(body, "node-already-quiet") {
		t.Errorf("quiet twice: %d %s", code, body)
	}
	waitBeats(t, db, "quiet-node", 2) // it has read its maxthreads 0
	second := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "echo second"}})[0]
	dentest.WaitStatus(t, db, first, 1)
	waitBeats(t, db, "quiet-node", 5)
	if st, _ := dentest.Task(t, db, second).Lookup("status").AsInt64OK(); st != -2 {
		t.Fatalf("a quiet node started a task: status %d", st)
	}
	_, page := get(t, client(jar), srv.URL+"/nodes/quiet-node")
	if !strings.Contains(page, `id="quiet"`) || !strings.Contains(page, "resumes with maxthreads none") || !strings.Contains(page, `id="node-resume"`) {
		t.Errorf("the node page does not show it quiet:\n%s", page)
	}
	if code, body = postBody(t, srv.URL+"/nodes/quiet-node/resume", nil, bearer); code != 200 || !strings.Contains(body, "node-resumed") {
		t.Fatalf("resume: %d %s", code, body)
	}
	if raw := nodeDoc(t, db, "quiet-node"); raw.Lookup("maxthreads").Type != 0 || raw.Lookup("quiet").Type != 0 {
		t.Errorf("resumed node document: %s", raw)
	}
	dentest.WaitStatus(t, db, second, 1)
	for _, act := range []string{"quiet", "resume", "forget"} {
		if code := post(t, client(nil), srv.URL+"/nodes/nosuch/"+act, url.Values{}, bearer); code != 404 {
			t.Errorf("%s of no node: %d, want 404", act, code)
		}
	}
	if code, body = postBody(t, srv.URL+"/nodes/quiet-node/forget", nil, bearer); code != 409 || !strings.Contains(body, "alive") {
		t.Errorf("forget a running node: %d %s", code, body)
	}
}

// A dead node is forgotten through its action URL; its maxthreads, kept
// while quiet, comes back on resume.
func TestNodeForgetAndResumeKeepsMaxThreads(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "node", Value: "old"}, {Key: "timestamp", Value: time.Now().Add(-time.Hour)}},
		bson.D{{Key: "node", Value: "w2"}, {Key: "timestamp", Value: time.Now()}, {Key: "maxthreads", Value: int32(3)}})
	srv := serve(t, db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	if code := post(t, client(nil), srv.URL+"/nodes/old/forget", nil, nil); code != 403 || dentest.Count(t, db.Collection("nodes"), bson.D{}) != 2 {
		t.Errorf("forget without the token: %d", code)
	}
	if code, body := postBody(t, srv.URL+"/nodes/old/forget", nil, bearer); code != 200 || !strings.Contains(body, "node-forgotten") {
		t.Errorf("forget a dead node: %d %s", code, body)
	}
	if dentest.Count(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "old"}}) != 0 {
		t.Error("the dead node's document is still there")
	}
	post(t, client(nil), srv.URL+"/nodes/w2/quiet", nil, bearer)
	if mt, _ := nodeDoc(t, db, "w2").Lookup("quiet", "maxthreads").AsInt64OK(); mt != 3 {
		t.Errorf("quiet kept maxthreads %d, want 3", mt)
	}
	if _, page := get(t, client(nil), srv.URL+"/"); !strings.Contains(page, `<a class="status paused quiet" href="/nodes/w2"`) || !strings.Contains(page, "<small>resumes: 3</small>") {
		t.Error("the overview does not show the quiet node as quiet")
	}
	post(t, client(nil), srv.URL+"/nodes/w2/resume", nil, bearer)
	if mt, _ := nodeDoc(t, db, "w2").Lookup("maxthreads").AsInt64OK(); mt != 3 {
		t.Errorf("resumed with maxthreads %d, want 3", mt)
	}
}
