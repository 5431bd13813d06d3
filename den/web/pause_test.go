package web_test

import (
	"net/http"
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
