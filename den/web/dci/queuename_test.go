package dci_test

import (
	"encoding/json"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// Queue names through the Disbatch web API (issue 41, finding 8): a
// queue is not created, nor renamed, with a name that is 24 hexadecimal
// digits (here another queue's id) or over 200 bytes, each refused with a
// 400 that says why; a queue a writer named with another's id does not
// hide that queue from its id (on main: "2 queues match" for its writes).
func TestQueueNamesThroughTheAPI(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	srv := serve(t, db, testToken)
	a := dentest.Queue(t, db, "a", "Disbatch::Plugin::Demo", 1, "fifo")
	body := func(name string) string {
		b, _ := json.Marshal(map[string]string{"name": name, "plugin": "Disbatch::Plugin::Demo"})
		return string(b)
	}
	for _, c := range []struct {
		what, method, path, ct, body, say string
	}{
		{"create named with another's id", "POST", "/queues", "application/json", body(a.Hex()), "24 hexadecimal digits"},
		{"create with 100,000 bytes", "POST", "/queues", "application/json", body(strings.Repeat("n", 100_000)), "at most 200"},
		{"older create named with another's id", "POST", "/start-queue-json", "application/x-www-form-urlencoded",
			"type=Disbatch%3A%3APlugin%3A%3ADemo&name=" + a.Hex(), "24 hexadecimal digits"},
		{"rename to another's id", "POST", "/queues/a", "application/json", `{"name":"` + strings.ToUpper(a.Hex()) + `"}`, "24 hexadecimal digits"},
		{"rename to 201 bytes", "POST", "/queues/a", "application/json", `{"name":"` + strings.Repeat("n", 201) + `"}`, "at most 200"},
	} {
		st, _, got := call(t, c.method, srv.URL+c.path, c.ct, c.body, bearer)
		if st != 400 || !strings.Contains(got, c.say) || len(got) > 1000 {
			t.Errorf("%s: %d %.300s; want 400 saying %q", c.what, st, got, c.say)
		}
	}
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 1 {
		t.Fatalf("%d queues after refused creates, want 1", n)
	}
	if n := dentest.Count(t, db.Collection("queues"), bson.D{{Key: "name", Value: "a"}}); n != 1 {
		t.Fatalf("queue a was renamed")
	}

	// A writer names a queue with a's id: a is still a by its id.
	forged := dentest.Queue(t, db, a.Hex(), "Disbatch::Plugin::Demo", 1, "fifo")
	if st, _, got := call(t, "GET", srv.URL+"/queues/"+a.Hex(), "", "", ""); st != 200 || !strings.Contains(got, `"name":"a"`) {
		t.Errorf("GET /queues/ID: %d %.300s; want queue a", st, got)
	}
	if st, _, got := call(t, "POST", srv.URL+"/queues/"+a.Hex(), "application/json", `{"threads":3}`, bearer); st != 200 {
		t.Errorf("POST /queues/ID: %d %.300s; want 200", st, got)
	}
	for id, want := range map[bson.ObjectID]any{a: int32(3), forged: nil} {
		raw, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := raw.Lookup("threads").Int32OK()
		if (want == nil && raw.Lookup("threads").Type != 0) || (want != nil && got != want) {
			t.Errorf("queue %s: threads %v, want %v", id.Hex(), raw.Lookup("threads"), want)
		}
	}
}
