package dci_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// The API reads what anyone with insert rights wrote: the corpus of
// hostile tasks, queues and nodes (dentest) beside a good queue, node and
// task. Every read answers (no 500, no panic) with JSON that parses,
// showing the good ones, and the writes still work on the good queue.
func TestRoutesReadHostileDocuments(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	db := dentest.DB(t)
	srv := serve(t, db, testToken)
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "goodnode"}, {Key: "timestamp", Value: time.Now()},
		{Key: "plugins", Value: bson.A{"Disbatch::Plugin::Demo"}}})
	if st, _, body := call(t, "POST", srv.URL+"/queues", "application/json", `{"name":"good","plugin":"Disbatch::Plugin::Demo"}`, bearer); st != 200 {
		t.Fatalf("create the good queue: %d %s", st, body)
	}
	qid := findQueueNamed(t, db, "good")
	if st, _, body := call(t, "POST", srv.URL+"/tasks/good", "application/json", `[{"goodtask":1}]`, bearer); st != 200 {
		t.Fatalf("post the good task: %d %s", st, body)
	}
	// The fields the API reads of a task, with every value; the queues'
	// and nodes' corpora whole.
	read := []string{"queue", "status", "node", "parameters", "params", "ctime", "mtime", "stdout", "stderr"}
	var tasks []dentest.Hostile
	for _, h := range dentest.HostileTasks(qid, "n1", bson.D{{Key: "i", Value: 0}}) {
		for _, field := range read {
			if strings.HasPrefix(h.What, "task "+field+" ") || strings.HasPrefix(h.What, "task _id ") || strings.HasPrefix(h.What, "task with ") {
				tasks = append(tasks, h)
				break
			}
		}
	}
	dentest.InsertHostile(t, db.Collection("tasks"), tasks)
	dentest.InsertHostile(t, db.Collection("queues"), dentest.HostileQueues("Disbatch::Plugin::Demo"))
	dentest.InsertHostile(t, db.Collection("nodes"), dentest.HostileNodes())

	check := func(method, path, ct, body string, want ...string) {
		t.Helper()
		auth := ""
		if method != "GET" {
			auth = bearer
		}
		st, _, got := call(t, method, srv.URL+path, ct, body, auth)
		if st != 200 {
			t.Errorf("%s %s %s: %d %.300s", method, path, body, st, got)
			return
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s %s %s: not JSON: %.300s", method, path, body, got)
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %s %s: lacks %q", method, path, body, w)
			}
		}
	}
	const j = "application/json"
	check("GET", "/nodes", "", "", `"goodnode"`)
	check("GET", "/nodes/goodnode", "", "", `"goodnode"`)
	check("GET", "/plugins", "", "", `"Disbatch::Plugin::Demo"`)
	check("GET", "/queues", "", "", `"good"`)
	check("GET", "/queues/good", "", "", `"good"`)
	check("GET", "/scheduler-json", "", "", `"good"`)
	check("GET", "/queue-prototypes-json", "", "", `"Disbatch::Plugin::Demo"`)
	check("POST", "/tasks/search", j, `{"filter":{"params.goodtask":1}}`, `"goodtask"`)
	check("POST", "/tasks/search", j, `{"filter":{"queue":"`+qid.Hex()+`"},"terse":0}`)
	check("POST", "/tasks/search", j, `{"filter":{},"options":{"skip":50},"pretty":1}`)
	check("POST", "/tasks/search", j, `{"filter":{"queue":"`+qid.Hex()+`"},"count":1}`, `"count"`)
	check("POST", "/search-tasks-json", "application/x-www-form-urlencoded", "filter=%7B%7D&queue="+qid.Hex()+"&terse=0", `"goodtask"`)
	check("POST", "/tasks/good", j, `[{"goodtask":2}]`, `"inserted"`)
	check("POST", "/queues/good", j, `{"threads":1}`, `"modified_count":1`)
	check("POST", "/tasks/good/nodes", j, `{"filter":{"node":"goodnode"},"params":{"node":"document.node"}}`, `"inserted"`)
	check("DELETE", "/queues/good", "", "", `"deleted_count":1`)
}

// findQueueNamed returns the _id of the queue of that name.
func findQueueNamed(t *testing.T, db *mongo.Database, name string) bson.ObjectID {
	t.Helper()
	raw, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "name", Value: name}}).Raw()
	if err != nil {
		t.Fatalf("find queue %s: %v", name, err)
	}
	return raw.Lookup("_id").ObjectID()
}
