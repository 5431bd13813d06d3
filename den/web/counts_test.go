package web_test

import (
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
