package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

const testToken = "test-token-0123456789"

// fixture is a database with one queue and tasks in every state a page
// shows, written as a node would have left them.
type fixture struct {
	db                          *mongo.Database
	queue                       bson.ObjectID
	done, gfs, running, waiting bson.ObjectID
	// liveRun is the running task's run, whose live output the task holds.
	liveRun bson.ObjectID
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	db := dentest.DB(t)
	f := fixture{db: db}
	f.queue = dentest.Queue(t, db, "resize", "Disbatch::Plugin::Command", 2, "fifo")
	ids := dentest.Tasks(t, db, f.queue, bson.D{{Key: "shell", Value: "echo hello"}}, bson.D{{Key: "i", Value: 2}},
		bson.D{{Key: "i", Value: 3}}, bson.D{{Key: "i", Value: 4}})
	f.done, f.gfs, f.running, f.waiting = ids[0], ids[1], ids[2], ids[3]
	now := time.Now()
	tasks := db.Collection("tasks")
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.done}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: now},
		{Key: "stdout", Value: "hello ünïcode\n"}, {Key: "stderr", Value: "a warning\n"}}}})
	w := gridfs.NewBucket(db, "tasks").Create(dentest.Context(t), "out", nil)
	w.Write([]byte(strings.Repeat("0123456789", 1000)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.gfs}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 2}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: now}, {Key: "stdout", Value: w.ID()},
		{Key: "outcome", Value: "exit_code"}, {Key: "outcome_reason", Value: "exited with code 3"}}}})
	// Node n1 counted what it finished in the stats, as a node does: the
	// overview's "finished lately".
	if err := queue.NewStore(db).AddStats(dentest.Context(t), []queue.QueueStat{{Queue: f.queue, Name: "resize", At: now, Succeeded: 1, Failed: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	// The running task has published live output: the last bytes of
	// stdout (offsets 1000 to 1009) and all of stderr.
	f.liveRun = bson.NewObjectID()
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.running}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 0}, {Key: "node", Value: "n1"},
		{Key: "runner", Value: bson.D{{Key: "token", Value: f.liveRun}, {Key: "pid", Value: 1}, {Key: "started", Value: int64(1)}, {Key: "host", Value: "h"}}},
		{Key: "live", Value: bson.D{{Key: "token", Value: f.liveRun}, {Key: "at", Value: now},
			{Key: "stdout", Value: bson.D{{Key: "from", Value: int64(1000)}, {Key: "data", Value: []byte("live tail\n")}}},
			{Key: "stderr", Value: bson.D{{Key: "from", Value: int64(0)}, {Key: "data", Value: []byte("err")}}}}}}}})
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "n1"}, {Key: "timestamp", Value: now},
		{Key: "queues", Value: bson.A{}}, {Key: "version", Value: "v1.2.3"}, {Key: "pid", Value: 4242},
		{Key: "started", Value: now.Add(-time.Hour)},
		{Key: "resources", Value: bson.D{{Key: "cpus", Value: 8}, {Key: "load", Value: bson.A{0.42, 0.5, 0.25}},
			{Key: "memory_total_mb", Value: int64(16000)}, {Key: "memory_available_mb", Value: int64(9000)},
			{Key: "disk_path", Value: "/var/tmp"}, {Key: "disk_free_mb", Value: int64(50000)}, {Key: "at", Value: now}}}})
	return f
}

// client is an HTTP client that does not follow redirects (an action's
// answer is its 303).
func client(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, Transport: testTransport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// testTransport is the tests' own, not http.DefaultTransport: every
// httptest.Server's Close closes the default transport's idle
// connections, and a parallel test's request that had just picked one
// failed ("http: CloseIdleConnections called").
var testTransport = http.DefaultTransport.(*http.Transport).Clone()

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post posts a form and returns the status (postResp).
func post(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) int {
	t.Helper()
	return postResp(t, c, u, form, header).StatusCode
}

func cancelFlag(t *testing.T, db *mongo.Database, id bson.ObjectID) bool {
	return dentest.Task(t, db, id).Lookup("cancel").Type == bson.TypeBoolean
}

// The pages show what the database holds: queues with their counts and
// what finished lately, the node with its resources, the tasks.
func TestPagesShowTheDatabase(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, "")
	c := client(nil)
	code, body := get(t, c, srv.URL+"/")
	if code != 200 {
		t.Fatalf("GET / %d: %s", code, body)
	}
	for _, want := range []string{"resize", `data-label="Todo" class="num">1<`, `class="running" href="/tasks?queue=` + f.queue.Hex() + `&amp;status=claimed%2Crunning">1<`,
		`data-label="Done" class="num">1<`, "1 ok, <span class=\"bad\">1 failed</span>", "n1", "pid 4242", "0.42 0.50 0.25", "8 CPUs",
		"8.8 GiB", "of 16 GiB", "/var/tmp", "v1.2.3", f.gfs.Hex()} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	for _, tc := range []struct {
		query     string
		want, not []bson.ObjectID
		code      int
	}{
		{"", []bson.ObjectID{f.done, f.gfs, f.running, f.waiting}, nil, 200},
		{"?status=claimed,running", []bson.ObjectID{f.running}, []bson.ObjectID{f.done, f.waiting}, 200},
		{"?status=failed,orphaned&queue=resize", []bson.ObjectID{f.gfs}, []bson.ObjectID{f.done}, 200},
		{"?node=n1&limit=2", []bson.ObjectID{f.running, f.gfs}, []bson.ObjectID{f.done}, 200}, // newest first
		{"?outcome=exit_code", []bson.ObjectID{f.gfs}, []bson.ObjectID{f.done, f.running}, 200},
		{"?outcome=bogus", nil, []bson.ObjectID{f.gfs}, 400},
		{"?queue=nosuch", nil, []bson.ObjectID{f.done}, 400},
		{"?status=bogus", nil, []bson.ObjectID{f.done}, 400},
		{"?limit=0", nil, []bson.ObjectID{f.done}, 400},
	} {
		code, body := get(t, c, srv.URL+"/tasks"+tc.query)
		if code != tc.code {
			t.Errorf("/tasks%s: %d, want %d", tc.query, code, tc.code)
		}
		for _, id := range tc.want {
			if !strings.Contains(body, `data-task="`+id.Hex()+`"`) {
				t.Errorf("/tasks%s lacks %s", tc.query, id.Hex())
			}
		}
		for _, id := range tc.not {
			if strings.Contains(body, `data-task="`+id.Hex()+`"`) {
				t.Errorf("/tasks%s lists %s", tc.query, id.Hex())
			}
		}
	}
	code, body = get(t, c, srv.URL+"/tasks/"+f.done.Hex())
	if code != 200 || !strings.Contains(body, "hello ünïcode\n</pre>") || !strings.Contains(body, "a warning") || !strings.Contains(body, "echo hello") {
		t.Errorf("task page %d: %s", code, body)
	}
	if _, body := get(t, c, srv.URL+"/tasks/"+f.gfs.Hex()); !strings.Contains(body, "<strong>exit_code</strong>: exited with code 3") {
		t.Errorf("the failed task's page does not show its outcome")
	}
	if code, _ := get(t, c, srv.URL+"/tasks/"+bson.NewObjectID().Hex()); code != 404 {
		t.Errorf("unknown task: %d, want 404", code)
	}
}

type outputReply struct {
	Data    string `json:"data"`
	Next    int64  `json:"next"`
	Total   int64  `json:"total"`
	More    bool   `json:"more"`
	Reset   bool   `json:"reset"`
	Skipped int64  `json:"skipped"`
	Ended   bool   `json:"ended"`
	Status  *int   `json:"status"`
}

// The output endpoint returns the bytes after an offset, from the task
// document or from GridFS, and says whether the task ended.
func TestOutputEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, "")
	c := client(nil)
	read := func(id bson.ObjectID, query string) (int, outputReply) {
		code, body := get(t, c, srv.URL+"/tasks/"+id.Hex()+"/output"+query)
		var r outputReply
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
		}
		return code, r
	}
	const text = "hello ünïcode\n" // 16 bytes
	for _, tc := range []struct {
		id    bson.ObjectID
		query string
		want  outputReply
	}{
		{f.done, "?stream=stdout&from=0", outputReply{Data: text, Next: 16, Total: 16, Ended: true}},
		{f.done, "?stream=stdout&from=6", outputReply{Data: text[6:], Next: 16, Total: 16, Ended: true}},
		{f.done, "?stream=stdout&from=16", outputReply{Data: "", Next: 16, Total: 16, Ended: true}},
		{f.done, "?stream=stdout&from=99", outputReply{Data: text, Next: 16, Total: 16, Ended: true, Reset: true}},
		{f.done, "?stream=stderr", outputReply{Data: "a warning\n", Next: 10, Total: 10, Ended: true}},
		{f.gfs, "?from=9990", outputReply{Data: "0123456789", Next: 10000, Total: 10000, Ended: true}},
		// A running task's live output: the kept tail, and what was not kept.
		{f.running, "?from=0", outputReply{Data: "live tail\n", Next: 1010, Total: 1010, Skipped: 1000}},
		{f.running, "?from=1005", outputReply{Data: "tail\n", Next: 1010, Total: 1010}},
		{f.running, "?from=1010", outputReply{Next: 1010, Total: 1010}},
		{f.running, "?stream=stderr&from=1", outputReply{Data: "rr", Next: 3, Total: 3}},
	} {
		code, got := read(tc.id, tc.query)
		got.Status = nil
		if code != 200 || got != tc.want {
			t.Errorf("%s%s: %d %+v, want %+v", tc.id.Hex(), tc.query, code, got, tc.want)
		}
	}
	// GridFS output larger than one reply comes in parts.
	code, got := read(f.gfs, "?from=0")
	if code != 200 || len(got.Data) != 10000 || got.More {
		t.Errorf("whole GridFS output: %d, %d bytes, more %v", code, len(got.Data), got.More)
	}
	for _, q := range []string{"?stream=stdin", "?from=-1", "?from=x"} {
		if code, _ := read(f.done, q); code != 400 {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
	if code, _ := read(bson.NewObjectID(), ""); code != 404 {
		t.Errorf("unknown task: %d, want 404", code)
	}
	// Reading a running task asks its node for live output (live_until),
	// and only a task that has not ended.
	if until, ok := dentest.Task(t, f.db, f.running).Lookup("live_until").TimeOK(); !ok || time.Until(until) < 20*time.Second {
		t.Errorf("polling a running task left live_until %v, want about 30s ahead", dentest.Task(t, f.db, f.running).Lookup("live_until"))
	}
	if v := dentest.Task(t, f.db, f.done).Lookup("live_until"); v.Type != 0 {
		t.Errorf("reading an ended task set live_until %v", v)
	}
	// Output of an earlier run is never shown as this run's.
	dentest.Update(t, f.db.Collection("tasks"), bson.D{{Key: "_id", Value: f.running}}, bson.D{{Key: "$set", Value: bson.D{{Key: "live.token", Value: bson.NewObjectID()}}}})
	if code, got := read(f.running, "?from=0"); code != 200 || got.Data != "" || got.Total != 0 {
		t.Errorf("live output of another run: %d %+v, want none", code, got)
	}
	code, body := get(t, c, srv.URL+"/tasks/"+f.gfs.Hex()+"/output.txt?stream=stdout")
	if code != 200 || len(body) != 10000 {
		t.Errorf("output.txt: %d, %d bytes", code, len(body))
	}
}

// Without a token the page is read-only: no action is shown, every action
// is refused with 403 and changes nothing.
func TestReadOnlyWithoutToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, "")
	c := client(nil)
	_, body := get(t, c, srv.URL+"/tasks/"+f.running.Hex())
	if strings.Contains(body, `id="cancel"`) || !strings.Contains(body, "Read-only") {
		t.Errorf("read-only task page shows a cancel button or no read-only note")
	}
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/tasks/" + f.running.Hex() + "/cancel", url.Values{"token": {testToken}}},
		{"/tasks/" + f.done.Hex() + "/retry", nil},
		{"/nodes/maxthreads", url.Values{"node": {"n1"}, "maxthreads": {"0"}}},
		{"/login", url.Values{"token": {testToken}}},
	} {
		if code := post(t, c, srv.URL+tc.path, tc.form, http.Header{"Authorization": {"Bearer " + testToken}}); code != 403 {
			t.Errorf("POST %s: %d, want 403", tc.path, code)
		}
	}
	if cancelFlag(t, f.db, f.running) {
		t.Error("a read-only page cancelled a task")
	}
	if st, _ := dentest.Task(t, f.db, f.done).Lookup("status").AsInt64OK(); st != 1 {
		t.Errorf("a read-only page retried a task: status %d", st)
	}
	if dentest.Count(t, f.db.Collection("nodes"), bson.D{{Key: "maxthreads", Value: bson.D{{Key: "$exists", Value: true}}}}) != 0 {
		t.Error("a read-only page set maxthreads")
	}
}

// With a token, every action request is checked: the token in a header or
// a form field, or the login cookie with the page's CSRF field, and never
// from another origin.
func TestActionsNeedTheToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	// A logged-in browser: its cookie, and the CSRF field of its pages.
	jar, _ := cookiejar.New(nil)
	browser := client(jar)
	if code := post(t, browser, srv.URL+"/login", url.Values{"token": {"wrong-token-0123456789"}}, nil); code != 403 {
		t.Errorf("login with a wrong token: %d, want 403", code)
	}
	if code := post(t, browser, srv.URL+"/login", url.Values{"token": {testToken}}, nil); code != 303 {
		t.Fatalf("login: %d, want 303", code)
	}
	_, page := get(t, browser, srv.URL+"/tasks/"+f.running.Hex())
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `id="cancel"`) {
		t.Fatalf("a logged-in task page has no cancel form with a CSRF field")
	}
	csrf := m[1]
	anon := client(nil)
	for _, tc := range []struct {
		name   string
		c      *http.Client
		form   url.Values
		header http.Header
		want   int
	}{
		{"nothing", anon, nil, nil, 403},
		{"wrong bearer", anon, nil, http.Header{"Authorization": {"Bearer nope-0123456789abcdef"}}, 403},
		{"wrong form token", anon, url.Values{"token": {"nope"}}, nil, 403},
		{"CSRF field without the cookie", anon, url.Values{"csrf": {csrf}}, nil, 403},
		{"cookie without the CSRF field", browser, nil, nil, 403},
		{"cookie with a wrong CSRF field", browser, url.Values{"csrf": {"00"}}, nil, 403},
		{"bearer from another origin", anon, nil, http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"https://evil.example"}}, 403},
		{"cookie from another site", browser, url.Values{"csrf": {csrf}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"bearer (a script: answered in JSON)", anon, nil, http.Header{"Authorization": {"Bearer " + testToken}}, 200},
		{"form token", anon, url.Values{"token": {testToken}}, nil, 303},
		{"cookie and CSRF field", browser, url.Values{"csrf": {csrf}}, http.Header{"Origin": {srv.URL}}, 303},
		{"behind a proxy that sets X-Forwarded-Host", browser, url.Values{"csrf": {csrf}},
			http.Header{"Origin": {"https://status.example.com"}, "X-Forwarded-Host": {"status.example.com"}}, 303},
		{"an opaque origin", anon, nil, http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"null"}}, 403},
	} {
		// A fresh queued task per case: a refused cancel leaves it as it was.
		id := dentest.Tasks(t, f.db, f.queue, bson.D{{Key: "case", Value: tc.name}})[0]
		code := post(t, tc.c, srv.URL+"/tasks/"+id.Hex()+"/cancel", tc.form, tc.header)
		if code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
		if got := cancelFlag(t, f.db, id); got != (tc.want < 400) {
			t.Errorf("%s: cancel flag %v after %d", tc.name, got, code)
		}
	}
	// Retry and maxthreads work with the token, as den task retry and den
	// node set do.
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	if code := post(t, anon, srv.URL+"/tasks/"+f.gfs.Hex()+"/retry", nil, bearer); code != 200 {
		t.Errorf("retry: %d", code)
	}
	if st, _ := dentest.Task(t, f.db, f.gfs).Lookup("status").AsInt64OK(); st != -2 {
		t.Errorf("retried task has status %d, want -2", st)
	}
	if code := post(t, anon, srv.URL+"/nodes/maxthreads", url.Values{"node": {"n1"}, "maxthreads": {"3"}}, bearer); code != 200 {
		t.Errorf("maxthreads: %d", code)
	}
	raw, err := f.db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "n1"}}).Raw()
	if mt, _ := raw.Lookup("maxthreads").AsInt64OK(); err != nil || mt != 3 {
		t.Errorf("node maxthreads %v (%v), want 3", raw.Lookup("maxthreads"), err)
	}
	for _, bad := range []url.Values{{"node": {"n1"}, "maxthreads": {"-1"}}, {"node": {"nosuch"}, "maxthreads": {"1"}}, {"maxthreads": {"1"}}} {
		if code := post(t, anon, srv.URL+"/nodes/maxthreads", bad, bearer); code != 400 {
			t.Errorf("maxthreads %v: %d, want 400", bad, code)
		}
	}
	// Logging out ends the session.
	if code := post(t, browser, srv.URL+"/logout", nil, nil); code != 303 {
		t.Errorf("logout: %d", code)
	}
	if _, page := get(t, browser, srv.URL+"/tasks/"+f.running.Hex()); strings.Contains(page, `id="cancel"`) {
		t.Error("after logging out the page still shows the cancel button")
	}
}

// A queued task that no node can run as it requests shows why on its page
// and as "(unfit)" in the task list; a stale note on a task that has run
// shows nowhere.
func TestUnfitShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	why := "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus"
	for _, id := range []bson.ObjectID{f.waiting, f.done} {
		dentest.Update(t, f.db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "unfit", Value: why}}}})
	}
	srv := serve(t, f.db, "")
	c := client(nil)
	if _, body := get(t, c, srv.URL+"/tasks/"+f.waiting.Hex()); !strings.Contains(body, `<dd id="unfit">`+why+`</dd>`) || !strings.Contains(body, "-2 queued (unfit)") {
		t.Errorf("the waiting task's page does not say why it waits:\n%s", body)
	}
	if _, body := get(t, c, srv.URL+"/tasks/"+f.done.Hex()); strings.Contains(body, why) && strings.Contains(body, `id="unfit"`) {
		t.Errorf("the finished task's page shows a stale unfit note")
	}
	if _, body := get(t, c, srv.URL+"/tasks?status=queued"); !strings.Contains(body, "-2 queued (unfit)") {
		t.Errorf("the task list does not mark the unfit task:\n%s", body)
	}
}

// A task retried on the page keeps the run that ended in its history,
// output included; the history rows link to each run's output, which
// output.txt?attempt=N serves once later runs replaced the task's own.
func TestEarlierRunsOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	c := client(nil)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	if code := post(t, c, srv.URL+"/tasks/"+f.done.Hex()+"/retry", nil, bearer); code != 200 {
		t.Fatalf("retry: %d, want 200", code)
	}
	// The next run ends, with output of its own.
	dentest.Update(t, f.db.Collection("tasks"), bson.D{{Key: "_id", Value: f.done}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 1}, {Key: "node", Value: "n2"}, {Key: "mtime", Value: time.Now()}, {Key: "stdout", Value: "second run\n"}, {Key: "stderr", Value: ""}}}})
	_, page := get(t, c, srv.URL+"/tasks/"+f.done.Hex())
	for _, want := range []string{"output.txt?stream=stdout&amp;attempt=1", "output.txt?stream=stderr&amp;attempt=1", "retried by operator"} {
		if !strings.Contains(page, want) {
			t.Errorf("the task page's history does not have %q", want)
		}
	}
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"?stream=stdout&attempt=1", 200, "hello ünïcode\n"},
		{"?stream=stderr&attempt=1", 200, "a warning\n"},
		{"?stream=stdout&attempt=2", 200, "second run\n"},
		{"?stream=stdout", 200, "second run\n"},
		{"?stream=stdout&attempt=3", 404, ""},
		{"?stream=stdout&attempt=0", 400, ""},
		{"?stream=stdout&attempt=x", 400, ""},
	} {
		code, body := get(t, c, srv.URL+"/tasks/"+f.done.Hex()+"/output.txt"+tc.query)
		if code != tc.code || (tc.code == 200 && body != tc.body) {
			t.Errorf("output.txt%s: %d %q, want %d %q", tc.query, code, body, tc.code, tc.body)
		}
	}
}

// The schedules page lists each schedule with its times, its last task
// and its state; one that cannot fire says why.
func TestSchedulesPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := queue.NewStore(f.db)
	now := time.Now()
	// The nightly one fires 12 hours from now, so that it is never due
	// while the test runs (at 02:00 Berlin it was, and fired a second task).
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	nightly := fmt.Sprintf("0 %d * * *", (now.In(berlin).Hour()+12)%24)
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "nightly", Queue: f.queue, Cron: nightly, TZ: "Europe/Berlin"}, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "poll", Queue: f.queue, Every: time.Minute}, now.Add(-90*time.Second)); err != nil {
		t.Fatal(err)
	}
	fired, err := s.FireDue(dentest.Context(t), now.Add(-29*time.Second))
	if err != nil || len(fired.Inserted) != 1 {
		t.Fatalf("fire: %+v %v", fired, err)
	}
	dentest.Insert(t, f.db.Collection("schedules"), bson.D{{Key: "_id", Value: "broken"}, {Key: "queue", Value: f.queue}, {Key: "cron", Value: "99 * * * *"}})
	srv := serve(t, f.db, "")
	code, page := get(t, client(nil), srv.URL+"/schedules")
	if code != 200 {
		t.Fatalf("/schedules: %d", code)
	}
	for _, want := range []string{`data-schedule="nightly"`, nightly + " (Europe/Berlin)", `data-schedule="poll"`, "every 1m0s",
		`href="/tasks/` + fired.Inserted[0].Hex() + `"`, "cannot fire:", "above maximum", `href="/schedules" aria-current="page"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the schedules page does not have %q", want)
		}
	}
}

// A script's request to an action (a Bearer token, or Accept:
// application/json) is answered in JSON, its errors too; a browser's form
// is still redirected to its page with a note.
func TestActionsAnswerScriptsInJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	c := client(nil)
	do := func(path string, form url.Values, header http.Header) (int, string, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), body
	}
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	code, ctype, body := do("/tasks/"+f.waiting.Hex()+"/cancel", nil, bearer)
	if code != 200 || ctype != "application/json" || body["ok"] != true || body["result"] != "cancel-requested" || body["message"] == "" {
		t.Errorf("cancel by a script: %d %s %v", code, ctype, body)
	}
	code, _, body = do("/tasks/"+f.done.Hex()+"/cancel", url.Values{"token": {testToken}}, http.Header{"Accept": {"application/json"}})
	if code != 200 || body["result"] != "already-ended" {
		t.Errorf("cancel of an ended task, asking for JSON: %d %v", code, body)
	}
	code, ctype, body = do("/tasks/"+bson.NewObjectID().Hex()+"/retry", nil, bearer)
	if code != 404 || ctype != "application/json" || body["error"] == nil {
		t.Errorf("retry of no task by a script: %d %s %v", code, ctype, body)
	}
	code, _, body = do("/nodes/maxthreads", url.Values{"node": {"n1"}, "maxthreads": {"-1"}}, bearer)
	if code != 400 || body["error"] == nil {
		t.Errorf("a bad value from a script: %d %v", code, body)
	}
	code, _, body = do("/tasks/"+f.waiting.Hex()+"/cancel", nil, http.Header{"Authorization": {"Bearer wrong-token-0123456789"}})
	if code != 403 || body["error"] == nil {
		t.Errorf("a wrong token from a script: %d %v", code, body)
	}
	// A browser's form: redirected, as before.
	resp := postResp(t, c, srv.URL+"/tasks/"+f.running.Hex()+"/cancel", url.Values{"token": {testToken}}, nil)
	resp.Body.Close()
	if resp.StatusCode != 303 || !strings.Contains(resp.Header.Get("Location"), "msg=cancel-requested") {
		t.Errorf("a form's cancel: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}
