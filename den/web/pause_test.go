package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// The overview pauses and resumes a queue behind the token, as den queue
// pause and resume do, and shows a paused queue as paused with the limit
// it resumes with; a read-only page shows it but refuses the action.
func TestQueuePauseOnThePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	queueDoc := func() bson.Raw {
		raw, err := f.db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: f.queue}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	readOnly := serve(t, f.db, "")
	c := client(nil)
	if code := post(t, c, readOnly.URL+"/queues/"+f.queue.Hex()+"/pause", nil, bearer); code != 403 {
		t.Errorf("pause on a read-only page: %d, want 403", code)
	}
	if queueDoc().Lookup("paused").Type != 0 {
		t.Fatal("a read-only page paused the queue")
	}

	srv := serve(t, f.db, testToken)
	_, body := get(t, c, srv.URL+"/")
	if strings.Contains(body, "/queues/"+f.queue.Hex()+"/pause") {
		t.Error("the overview shows the pause button to a visitor without the token")
	}
	if code := post(t, c, srv.URL+"/queues/"+f.queue.Hex()+"/pause", nil, bearer); code != 200 {
		t.Fatalf("pause: %d, want 200", code)
	}
	raw := queueDoc()
	if mt, _ := raw.Lookup("maxthreads").AsInt64OK(); mt != 0 || raw.Lookup("paused", "maxthreads").Type == 0 {
		t.Fatalf("paused queue: %s", raw)
	}
	if by, _ := raw.Lookup("paused", "by").StringValueOK(); !strings.HasPrefix(by, "den web") {
		t.Errorf("paused by %q, want den web (address)", by)
	}
	_, body = get(t, c, readOnly.URL+"/")
	if !strings.Contains(body, `<span class="status paused"`) || !strings.Contains(body, "resumes: 2 per node") {
		t.Errorf("the overview does not show the queue paused:\n%s", body)
	}
	if code := post(t, c, srv.URL+"/queues/"+bson.NewObjectID().Hex()+"/resume", nil, bearer); code != 404 {
		t.Errorf("resume of no queue: %d, want 404", code)
	}
	if code := post(t, c, srv.URL+"/queues/"+f.queue.Hex()+"/resume", nil, bearer); code != 200 {
		t.Fatalf("resume: %d, want 200", code)
	}
	raw = queueDoc()
	if mt, _ := raw.Lookup("maxthreads").AsInt64OK(); mt != 2 || raw.Lookup("paused").Type != 0 || raw.Lookup("threads").Type != 0 {
		t.Errorf("resumed queue: %s", raw)
	}
}

// Scripts pause and resume a queue by its name as well as by its id, and
// are told which queue they acted on. An id wins over a name that looks
// like it; a name two queues share is refused (409) and changes nothing.
func TestQueueActionsByName(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	c := client(nil)
	paused := func(id bson.ObjectID) bool {
		raw, err := f.db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw.Lookup("paused").Type != 0
	}
	if code := post(t, c, srv.URL+"/queues/resize/pause", nil, nil); code != 403 {
		t.Errorf("pause by name without the token: %d, want 403", code)
	}
	jar, _ := cookiejar.New(nil)
	browser := client(jar)
	if code := post(t, browser, srv.URL+"/login", url.Values{"token": {testToken}}, nil); code != 303 {
		t.Fatalf("login: %d", code)
	}
	if code := post(t, browser, srv.URL+"/queues/resize/pause", nil, nil); code != 403 {
		t.Errorf("pause by name with the cookie but no CSRF field: %d, want 403", code)
	}
	if paused(f.queue) {
		t.Fatal("a refused pause paused the queue")
	}
	code, body := postBody(t, srv.URL+"/queues/resize/pause", nil, bearer)
	var got struct {
		OK     bool
		Result string
		Queue  struct{ ID, Name string }
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 200 {
		t.Fatalf("pause by name: %d %v %s", code, err, body)
	}
	if !got.OK || got.Result != "queue-paused" || got.Queue.ID != f.queue.Hex() || got.Queue.Name != "resize" {
		t.Errorf("pause by name answered %+v", got)
	}
	if !paused(f.queue) {
		t.Fatal("pause by name did not pause the queue")
	}
	if code := post(t, c, srv.URL+"/queues/resize/resume", nil, bearer); code != 200 || paused(f.queue) {
		t.Errorf("resume by name: %d, paused %v", code, paused(f.queue))
	}
	if code := post(t, c, srv.URL+"/queues/nosuch/pause", nil, bearer); code != 404 {
		t.Errorf("pause of no queue by name: %d, want 404", code)
	}
	// A queue named with the first queue's id: the id names the first.
	tricky := dentest.Queue(t, f.db, f.queue.Hex(), "Disbatch::Plugin::Command", 1, "fifo")
	if code := post(t, c, srv.URL+"/queues/"+f.queue.Hex()+"/pause", nil, bearer); code != 200 || !paused(f.queue) || paused(tricky) {
		t.Errorf("pause by an id another queue is named: %d; paused %v and %v, want the id's queue only", code, paused(f.queue), paused(tricky))
	}
	// Two queues of one name: refused, neither paused.
	a := dentest.Queue(t, f.db, "twin", "Disbatch::Plugin::Command", 1, "fifo")
	b := dentest.Queue(t, f.db, "twin", "Disbatch::Plugin::Command", 1, "fifo")
	code, body = postBody(t, srv.URL+"/queues/twin/pause", nil, bearer)
	if code != 409 || !strings.Contains(body, "give the id") || paused(a) || paused(b) {
		t.Errorf("pause of a shared name: %d %s; paused %v %v", code, body, paused(a), paused(b))
	}
}

// postBody posts form to u and returns the status and body.
func postBody(t *testing.T, u string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
