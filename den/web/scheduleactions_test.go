package web_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
	"github.com/den-project/den/queue"
)

// A schedule is paused, resumed, run now and deleted through its action
// URLs, behind the token and CSRF, as den schedule pause, resume and
// delete do; run now inserts its task once per second, counted in its
// queue, and leaves its next time alone; delete asks for confirm=NAME.
func TestScheduleActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(f.db)
	clk := newClock()
	clk.t = time.Now().Truncate(time.Second)
	if _, err := store.AddSchedule(ctx, queue.ScheduleSpec{Name: "hourly report", Queue: f.queue, Every: time.Hour,
		Parameters: mustRaw(t, bson.D{{Key: "report", Value: "sales"}})}, clk.now()); err != nil {
		t.Fatal(err)
	}
	srv := serveWith(t, web.Options{DB: f.db, Log: zaptest.NewLogger(t), Token: testToken, Now: clk.now})
	base := srv.URL + "/schedules/" + url.PathEscape("hourly report")
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	sched := func() *queue.Schedule {
		sc, err := store.Schedule(ctx, "hourly report")
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	before := sched()
	jar, csrf := loggedIn(t, srv.URL)
	for _, act := range []string{"pause", "run", "delete"} {
		if code := post(t, client(nil), base+"/"+act, nil, nil); code != 403 {
			t.Errorf("%s without the token: %d, want 403", act, code)
		}
		if code := post(t, client(jar), base+"/"+act, url.Values{"confirm": {"hourly report"}}, nil); code != 403 {
			t.Errorf("%s with the cookie, without the CSRF field: %d, want 403", act, code)
		}
	}
	if sc := sched(); sc == nil || sc.Paused || !sc.LastTask.IsZero() {
		t.Fatalf("refused actions changed the schedule: %+v", sc)
	}

	if code := post(t, client(jar), base+"/pause", url.Values{"csrf": {csrf}}, nil); code != 303 || !sched().Paused {
		t.Errorf("pause from the page: %d, paused %v", code, sched().Paused)
	}
	code, body := postBody(t, base+"/resume", nil, bearer)
	if code != 200 || sched().Paused || !strings.Contains(body, `"schedule":"hourly report"`) {
		t.Errorf("resume: %d %s, paused %v", code, body, sched().Paused)
	}

	code, body = postBody(t, base+"/run", nil, bearer)
	var ran struct{ Result, Schedule, Task string }
	if err := json.Unmarshal([]byte(body), &ran); err != nil || code != 200 || ran.Result != "schedule-run" {
		t.Fatalf("run now: %d %s", code, body)
	}
	id, _ := bson.ObjectIDFromHex(ran.Task)
	task := dentest.Task(t, f.db, id)
	if s, _ := task.Lookup("schedule").StringValueOK(); s != "hourly report" || task.Lookup("parameters", "report").StringValue() != "sales" {
		t.Errorf("run now inserted %s", task)
	}
	if sc := sched(); sc.LastTask != id || !sc.Next.Equal(before.Next) {
		t.Errorf("after run now: last task %s (want %s), next %s (was %s)", sc.LastTask.Hex(), id.Hex(), sc.Next, before.Next)
	}
	if code, body = postBody(t, base+"/run", nil, bearer); code != 200 || !strings.Contains(body, "schedule-run-already") {
		t.Errorf("a second run now in the same second: %d %s", code, body)
	}
	raw, _ := f.db.Collection("queues").FindOne(ctx, bson.D{{Key: "_id", Value: f.queue}}).Raw()
	if n, _ := raw.Lookup("count_total").AsInt64OK(); n != 5 {
		t.Errorf("count_total %d after one run now, want 5 (4 + 1)", n)
	}
	for _, act := range []string{"pause", "run", "delete"} {
		if code := post(t, client(nil), srv.URL+"/schedules/nosuch/"+act, url.Values{"confirm": {"nosuch"}}, bearer); code != 404 {
			t.Errorf("%s of no schedule: %d, want 404", act, code)
		}
	}

	if code, body = postBody(t, base+"/delete", nil, bearer); code != 400 || !strings.Contains(body, "confirm=hourly+report") || sched() == nil {
		t.Errorf("delete without confirm: %d %s", code, body)
	}
	if code, page := postBody(t, base+"/delete", url.Values{"csrf": {csrf}}, nil); code != 403 || sched() == nil {
		t.Errorf("delete with a CSRF field but no cookie: %d %s", code, page)
	}
	if code, body = postBody(t, base+"/delete", url.Values{"confirm": {"hourly report"}}, bearer); code != 200 || sched() != nil {
		t.Errorf("delete: %d %s", code, body)
	}
	dentest.Task(t, f.db, id) // its task stays
}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
