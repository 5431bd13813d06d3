package dci_test

import (
	"net/url"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// Tasks posted to a Disbatch 4 queue (plugin) carry params, to a protocol
// queue (constructor) parameters, by every route that adds tasks; a
// search by a parameter finds a task under either name, and counts it.
func TestParamsUnderEitherName(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	srv := serve(t, db, testToken)
	if st, _, body := call(t, "POST", srv.URL+"/queues", "application/json", `{"name":"d4","plugin":"Disbatch::Plugin::Demo"}`, bearer); st != 200 {
		t.Fatalf("create queue: %d %s", st, body)
	}
	d4 := findQueueNamed(t, db, "d4")
	old := dentest.Queue(t, db, "old", "Disbatch::Plugin::Demo", 1, "fifo")
	dentest.Insert(t, db.Collection("source"), bson.D{{Key: "u", Value: "x"}})
	for _, q := range []struct {
		name, field string
		id          bson.ObjectID
	}{{"d4", "params", d4}, {"old", "parameters", old}} {
		for _, post := range []struct{ path, ct, body string }{
			{"/tasks/" + q.name, "application/json", `[{"n":7}]`},
			{"/tasks/" + q.name + "/source", "application/json", `{"filter":{},"params":{"n":7,"u":"document.u"}}`},
			{"/queue-create-tasks-json", "application/x-www-form-urlencoded", "queueid=" + q.id.Hex() + "&object=" + url.QueryEscape(`[{"n":7}]`)},
			{"/queue-create-tasks-from-query-json", "application/x-www-form-urlencoded", "queueid=" + q.id.Hex() + "&collection=source&jsonfilter=%7B%7D&params=" + url.QueryEscape(`{"n":7}`)},
		} {
			if st, _, body := call(t, "POST", srv.URL+post.path, post.ct, post.body, bearer); st != 200 {
				t.Fatalf("POST %s: %d %s", post.path, st, body)
			}
		}
		other := map[string]string{"params": "parameters", "parameters": "params"}[q.field]
		if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: q.id}, {Key: q.field + ".n", Value: 7}}); n != 4 {
			t.Errorf("queue %s: %d tasks with %s.n 7, want all 4", q.name, n, q.field)
		}
		if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: q.id}, {Key: other, Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
			t.Errorf("queue %s: %d tasks with %s, want none", q.name, n, other)
		}
	}
	// What other writers put there: a Perl Disbatch 4's params in the
	// protocol queue, den task add's parameters (before it followed the
	// schema) in the Disbatch 4 queue.
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: old}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "params", Value: bson.D{{Key: "n", Value: 7}}}})
	dentest.TaskWith(t, db, d4, bson.D{{Key: "n", Value: 7}})
	dentest.TaskWith(t, db, d4, bson.D{{Key: "n", Value: "7"}})
	for _, s := range []struct{ filter, want string }{
		{`{"params.n":7}`, `{"count":10}`},
		{`{"parameters.n":7}`, `{"count":10}`},
		{`{"params.n":7,"queue":"` + d4.Hex() + `"}`, `{"count":5}`},
		{`{"params.n":"7"}`, `{"count":1}`},
		{`{"params.n":{"$ne":7}}`, `{"count":1}`},
	} {
		if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"filter":`+s.filter+`,"count":1}`, ""); st != 200 || body != s.want {
			t.Errorf("search %s: %d %s, want %s", s.filter, st, body, s.want)
		}
	}
	if st, _, body := call(t, "POST", srv.URL+"/search-tasks-json", "application/x-www-form-urlencoded", "count=1&filter="+url.QueryEscape(`{"params.n":7}`), ""); st != 200 || body != `[1,10]` {
		t.Errorf("search-tasks-json params.n 7: %d %s, want [1,10]", st, body)
	}
}
