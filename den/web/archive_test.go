package web_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// After den task archive (the same store call), an archived task's page
// answers 200 and shows it with its output, from the document and from
// GridFS; its output endpoints read it; the task list lists and searches
// the archive with ?archived=1 and offers no bulk action there; an id in
// neither collection is still a 404.
func TestArchivedTaskShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(f.db)
	ended, err := store.RetireCandidates(ctx, queue.RetireFilter{TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{f.queue}, Limit: 100}})
	if err != nil || len(ended) != 2 {
		t.Fatalf("ended tasks to archive: %d (%v), want 2", len(ended), err)
	}
	if _, err := store.RetireTasks(ctx, ended, queue.RetireArchive); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.db.Collection("tasks").CountDocuments(ctx, bson.D{{Key: "_id", Value: f.done}}); n != 0 {
		t.Fatal("the archived task is still in tasks")
	}
	srv := serve(t, f.db, testToken)
	c := client(nil)
	code, body := get(t, c, srv.URL+"/tasks/"+f.done.Hex())
	if code != 200 || !strings.Contains(body, `id="archived"`) || !strings.Contains(body, "hello ünïcode") || !strings.Contains(body, "a warning") {
		t.Fatalf("archived task's page: %d\n%s", code, body)
	}
	if strings.Contains(body, "data-live") {
		t.Error("an archived task's page polls for output")
	}
	code, body = get(t, c, srv.URL+"/tasks/"+f.gfs.Hex()+"/output.txt?stream=stdout")
	if code != 200 || body != strings.Repeat("0123456789", 1000) {
		t.Errorf("archived task's GridFS stdout: %d, %d bytes", code, len(body))
	}
	if code, body = get(t, c, srv.URL+"/tasks/"+f.gfs.Hex()+"/output?stream=stdout&from=9990"); code != 200 || !strings.Contains(body, `"data":"0123456789"`) {
		t.Errorf("archived task's output endpoint: %d %s", code, body)
	}
	// Retry by URL finds no task to change.
	if code := post(t, c, srv.URL+"/tasks/"+f.gfs.Hex()+"/retry", nil, http.Header{"Authorization": {"Bearer " + testToken}}); code != 404 {
		t.Errorf("retry of an archived task: %d, want 404", code)
	}

	// The list: the live tasks without them, the archive with only them.
	_, body = get(t, c, srv.URL+"/tasks")
	if strings.Contains(body, f.done.Hex()) || !strings.Contains(body, f.waiting.Hex()) {
		t.Error("the task list shows an archived task, or misses a live one")
	}
	_, body = get(t, c, srv.URL+"/tasks?archived=1&queue=resize")
	if !strings.Contains(body, f.done.Hex()) || !strings.Contains(body, f.gfs.Hex()) || strings.Contains(body, f.waiting.Hex()) || !strings.Contains(body, "Archived tasks") {
		t.Errorf("the archived list:\n%s", body)
	}
	_, body = get(t, c, srv.URL+"/tasks?archived=1&status=succeeded")
	if !strings.Contains(body, f.done.Hex()) || strings.Contains(body, f.gfs.Hex()) {
		t.Error("the archived list filtered by status succeeded")
	}
	_, body = get(t, c, srv.URL+"/tasks?archived=1&param=shell=echo+hello")
	if !strings.Contains(body, f.done.Hex()) || strings.Contains(body, f.gfs.Hex()) {
		t.Error("the archived list searched by a parameter")
	}
	jar, _ := loggedIn(t, srv.URL)
	if _, body = get(t, client(jar), srv.URL+"/tasks?archived=1"); strings.Contains(body, "bulk-cancel") {
		t.Error("the archived list offers bulk actions")
	}
	if _, body = get(t, client(jar), srv.URL+"/tasks/"+f.gfs.Hex()); strings.Contains(body, `id="retry"`) || !strings.Contains(body, `id="archived"`) {
		t.Error("a logged-in archived task's page offers retry")
	}
	if code, _ := get(t, c, srv.URL+"/tasks/"+bson.NewObjectID().Hex()); code != 404 {
		t.Errorf("a task in neither collection: %d, want 404", code)
	}
}

// loggedIn logs a browser in on the page at base and returns its cookies
// and its session's CSRF value, as a page's forms carry it.
func loggedIn(t *testing.T, base string) (http.CookieJar, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	if code := post(t, client(jar), base+"/login", url.Values{"token": {testToken}}, nil); code != 303 {
		t.Fatalf("login: %d", code)
	}
	_, page := get(t, client(jar), base+"/")
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("a logged-in page has no CSRF field:\n%s", page)
	}
	return jar, m[1]
}
