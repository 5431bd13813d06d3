package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// The counts the pages show cost one count of every task per
// web.counts_age, however many look: ten loads of the overview and a
// queue's page within the age count the tasks once, and say how old the
// counts are; once the age has passed, the next load counts again and
// shows what changed meanwhile.
func TestPagesCountOncePerCountsAge(t *testing.T) {
	t.Parallel()
	// Counts the census's counts (an aggregate of tasks grouping them by
	// status).
	p, counts := dentest.CountCommands(t, "aggregate", "tasks", "$status")
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	q := dentest.Queue(t, direct, "q", "P", 1, "fifo")
	dentest.Tasks(t, direct, q, bson.D{}, bson.D{})
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	h, err := web.New(web.Options{DB: db, Log: zaptest.NewLogger(t), CountsAge: time.Minute, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for i := range 10 {
		for _, path := range []string{"/", "/queues/q"} {
			code, body := get(t, http.DefaultClient, srv.URL+path)
			if code != http.StatusOK || !strings.Contains(body, "counted ") {
				t.Fatalf("load %d of %s: %d, no word of when the counts were made:\n%s", i, path, code, body)
			}
		}
	}
	if n := counts.Load(); n != 1 {
		t.Errorf("20 loads within the counts' age counted the tasks %d times; want once", n)
	}
	dentest.Tasks(t, direct, q, bson.D{})
	_, body := get(t, http.DefaultClient, srv.URL+"/queues/q")
	if !strings.Contains(body, `data-label="Tasks" class="num"><a href="/tasks?queue=`+q.Hex()+`">2</a>`) {
		t.Errorf("within the age, the queue's page shows the counts as they were made (2 tasks):\n%s", body)
	}
	now.Add(int64(time.Minute + time.Second))
	_, body = get(t, http.DefaultClient, srv.URL+"/queues/q")
	if !strings.Contains(body, `data-label="Tasks" class="num"><a href="/tasks?queue=`+q.Hex()+`">3</a>`) {
		t.Errorf("past the age, the queue's page shows the counts anew (3 tasks):\n%s", body)
	}
	if n := counts.Load(); n != 2 {
		t.Errorf("the tasks were counted %d times; want twice", n)
	}
}

// A queue's page reads why its newest waiting task waits (a count of the
// tasks before it) and its last ended tasks once per three times
// web.counts_age for every viewer, and says how old they are: ten loads
// within the age make each read once; past it, the next load reads them
// anew.
func TestQueuePageReadsOncePerAge(t *testing.T) {
	t.Parallel()
	// The driver's countDocuments is an aggregate with a $limit; the
	// last ended tasks are the find of the last 100.
	var whys, ended atomic.Int64
	p := dentest.Faults(t, 1, dentest.Counting("aggregate", "tasks", "$limit", &whys), dentest.Counting("find", "tasks", `"limit": {"$numberLong":"100"}`, &ended))
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	q := dentest.Queue(t, direct, "q", "P", 1, "fifo")
	dentest.Tasks(t, direct, q, bson.D{}, bson.D{})
	// A node serves the queue, so that nothing in the queue holds its
	// tasks and the page asks the newest why it waits.
	if _, err := direct.Collection("nodes").InsertOne(t.Context(), bson.D{{Key: "node", Value: "a"}, {Key: "timestamp", Value: time.Now()},
		{Key: "queues", Value: bson.A{bson.D{{Key: "id", Value: q.Hex()}, {Key: "name", Value: "q"}}}}}); err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	h, err := web.New(web.Options{DB: db, Log: zaptest.NewLogger(t), CountsAge: 10 * time.Second, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for i := range 10 {
		code, body := get(t, http.DefaultClient, srv.URL+"/queues/q")
		if code != http.StatusOK || !strings.Contains(body, "after the 1 queued before it") || !strings.Contains(body, fmt.Sprintf("(asked %ds ago)", 2*i)) {
			t.Fatalf("load %d: %d, no word of the task before the newest, or of when it was asked:\n%s", i, code, body)
		}
		now.Add(int64(2 * time.Second))
	}
	// Why counts twice: the tasks of higher priority, then those before.
	if w, e := whys.Load(), ended.Load(); w != 2 || e != 1 {
		t.Errorf("10 loads within 30 s made %d counts of the tasks before the newest and read the ended ones %d times; want 2 counts (one why), one read", w, e)
	}
	dentest.Tasks(t, direct, q, bson.D{})
	now.Add(int64(11 * time.Second)) // 31 s after the first load
	_, body := get(t, http.DefaultClient, srv.URL+"/queues/q")
	if !strings.Contains(body, "after the 2 queued before it") {
		t.Errorf("past the age, the page asks anew (2 tasks before the newest):\n%s", body)
	}
	if w := whys.Load(); w != 4 {
		t.Errorf("%d counts of the tasks before the newest; want 4 (two whys)", w)
	}
}
