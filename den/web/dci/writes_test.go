package dci_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web/dci"
)

// call sends a request with the given Authorization header value (empty:
// none) and returns the status, the headers and the body.
func call(t *testing.T, method, url, ct, body, auth string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

const bearer = "Bearer " + testToken

// Tasks posted in batches: every task checked before any is inserted, the
// counts raised by exactly what landed, params as Disbatch 4 writes them.
func TestPostTasksInBatches(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	srv := serve(t, db, testToken, func(o *dci.Options) { o.Batch = 3 })
	if st, _, body := call(t, "POST", srv.URL+"/queues", "application/json", `{"name":"q","plugin":"Disbatch::Plugin::Demo"}`, bearer); st != 200 {
		t.Fatalf("create queue: %d %s", st, body)
	}
	q := findQueue(t, db)
	if q.Lookup("plugin").StringValue() != "Disbatch::Plugin::Demo" || q.Lookup("count_todo").AsInt64() != 0 || q.Lookup("count_total").AsInt64() != 0 {
		t.Errorf("the new queue: %s; want plugin and both counts at 0", q)
	}
	// One bad task among good ones: nothing is inserted.
	if st, _, body := call(t, "POST", srv.URL+"/tasks/q", "application/json", `[{"a":1},{"b":2},{"c":3},{"d":4},{}]`, bearer); st != 400 || !strings.Contains(body, "key/value pairs") {
		t.Errorf("an empty task among five: %d %s, want 400", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/q", "application/json", `[{"a":1},{"b":2},{"c":{"$bad":3}},{"d":4}]`, bearer); st != 400 || !strings.Contains(body, "task 3") {
		t.Errorf("a task den cannot store: %d %s, want 400 naming task 3", st, body)
	}
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{}); n != 0 {
		t.Fatalf("%d tasks after refused posts, want 0", n)
	}
	var list []string
	for i := 0; i < 7; i++ {
		list = append(list, `{"n":`+string(rune('0'+i))+`}`)
	}
	st, _, body := call(t, "POST", srv.URL+"/tasks/q", "application/json", "["+strings.Join(list, ",")+"]", bearer)
	if st != 200 {
		t.Fatalf("post 7 tasks: %d %s", st, body)
	}
	var res struct {
		R struct {
			Inserted []struct {
				Index int
				ID    struct {
					OID string `json:"$oid"`
				} `json:"_id"`
			}
		} `json:"MongoDB::InsertManyResult"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.R.Inserted) != 7 || res.R.Inserted[6].Index != 6 {
		t.Fatalf("answer %s (%v), want 7 inserted with their index", body, err)
	}
	q = findQueue(t, db)
	if q.Lookup("count_todo").AsInt64() != 7 || q.Lookup("count_total").AsInt64() != 7 {
		t.Errorf("counts after 7 tasks in batches of 3: %s", q)
	}
	id, _ := bson.ObjectIDFromHex(res.R.Inserted[6].ID.OID)
	task := dentest.Task(t, db, id)
	if v := task.Lookup("params", "n"); v.AsInt64() != 6 || task.Lookup("status").AsInt64() != -2 || task.Lookup("node").AsInt64() != -1 {
		t.Errorf("the last task: %s; want params.n 6, status -2, node -1", task)
	}
	// From another collection, in batches too, with a dotted path.
	dentest.Insert(t, db.Collection("users"), bson.D{{Key: "u", Value: bson.D{{Key: "name", Value: "ann"}}}}, bson.D{{Key: "u", Value: bson.D{{Key: "name", Value: "bob"}}}},
		bson.D{{Key: "u", Value: "flat"}}, bson.D{{Key: "u", Value: bson.D{{Key: "name", Value: "cy"}}}})
	st, _, body = call(t, "POST", srv.URL+"/tasks/q/users", "application/json", `{"filter":{},"params":{"user":"document.u.name","k":5}}`, bearer)
	if st != 200 || strings.Count(body, `"index"`) != 4 {
		t.Fatalf("tasks from users: %d %s", st, body)
	}
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "params.user", Value: "bob"}, {Key: "params.k", Value: 5}}); n != 1 {
		t.Errorf("%d tasks for bob, want 1", n)
	}
	q = findQueue(t, db)
	if q.Lookup("count_todo").AsInt64() != 11 || q.Lookup("count_total").AsInt64() != 11 {
		t.Errorf("counts after 4 more: %s", q)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/q/system.js", "application/json", `{"filter":{},"params":{"a":"b"}}`, bearer); st != 400 {
		t.Errorf("tasks from a system collection: %d %s, want 400", st, body)
	}
	// threads is stored as a number, and replaces maxthreads; plugin
	// replaces constructor.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "name", Value: "q"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 1}, {Key: "constructor", Value: "Old"}}}})
	if st, _, body := call(t, "POST", srv.URL+"/queues/q", "application/x-www-form-urlencoded", "threads=2&plugin=Disbatch%3A%3APlugin%3A%3ADemo", bearer); st != 200 || !strings.Contains(body, `"modified_count":1`) {
		t.Errorf("set threads and plugin: %d %s", st, body)
	}
	q = findQueue(t, db)
	if q.Lookup("threads").Type != bson.TypeInt32 || q.Lookup("threads").Int32() != 2 || q.Lookup("maxthreads").Type != 0 || q.Lookup("constructor").Type != 0 {
		t.Errorf("the queue after threads=2: %s; want threads 2 (a number), no maxthreads, no constructor", q)
	}
}

// Writes need the token; reads do not. Read-only (no token): 403. A page
// of another site: 403. Bodies over the limit: 413. Operators that run
// code on the server: 400.
func TestAccess(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	srv := serve(t, db, testToken)
	ro := serve(t, db, "")
	create := `{"name":"q","plugin":"Disbatch::Plugin::Demo"}`
	for _, tc := range []struct {
		name, url, auth string
		header          []string
		want            int
		realm           bool
	}{
		{"no credentials", srv.URL, "", nil, 401, true},
		{"wrong bearer", srv.URL, "Bearer nope", nil, 401, true},
		{"wrong password", srv.URL, "Basic " + basic("u", "nope"), nil, 401, true},
		{"not base64", srv.URL, "Basic !!!", nil, 401, true},
		{"another site's page", srv.URL, bearer, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, false},
		{"read-only", ro.URL, bearer, nil, 403, false},
		{"bearer", srv.URL, bearer, nil, 200, false},
	} {
		st, h, body := call(t, "POST", tc.url+"/queues", "application/json", create, tc.auth, tc.header...)
		if st != tc.want || (h.Get("WWW-Authenticate") == `Basic realm="disbatch"`) != tc.realm {
			t.Errorf("%s: %d %q %s; want %d, WWW-Authenticate: %v", tc.name, st, h.Get("WWW-Authenticate"), body, tc.want, tc.realm)
		}
	}
	if st, _, body := call(t, "POST", srv.URL+"/queues/q", "application/json", `{"threads":1}`, "Basic "+basic("anyone", testToken)); st != 200 {
		t.Errorf("the token as the basic-auth password: %d %s", st, body)
	}
	for _, path := range []string{"/queues", "/queues/q", "/nodes", "/plugins", "/scheduler-json", "/queue-prototypes-json"} {
		if st, _, body := call(t, "GET", ro.URL+path, "", "", ""); st != 200 {
			t.Errorf("GET %s without a token: %d %s, want 200", path, st, body)
		}
	}
	if st, _, body := call(t, "POST", ro.URL+"/tasks/search", "application/json", `{"count":1}`, ""); st != 200 || body != `{"count":0}` {
		t.Errorf("a search without a token: %d %s", st, body)
	}
	big := `[` + strings.Repeat(`{"a":"`+strings.Repeat("x", 1000)+`"},`, dci.MaxTasksBody/1000) + `{"a":1}]`
	if st, _, body := call(t, "POST", srv.URL+"/tasks/q", "application/json", big, bearer); st != 413 {
		t.Errorf("a body over MaxTasksBody: %d %.200s, want 413", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"filter":{"a":"`+strings.Repeat("x", dci.MaxBody)+`"}}`, ""); st != 413 {
		t.Errorf("a search over MaxBody: %d %.200s, want 413", st, body)
	}
	for _, filter := range []string{`{"$where":"sleep(1000)"}`, `{"a":{"$elemMatch":{"$where":"1"}}}`, `{"$expr":{"$function":{"body":"x","args":[],"lang":"js"}}}`} {
		if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"filter":`+filter+`}`, ""); st != 400 || !strings.Contains(body, "runs code") {
			t.Errorf("filter %s: %d %s, want 400", filter, st, body)
		}
	}
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{}); n != 0 {
		t.Errorf("%d tasks after refused posts", n)
	}
}

func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

// GET /plugins lists the plugins live den nodes say they serve (and the
// configured ones); a dead node's do not count, and a queue of a plugin no
// one serves is refused, by the older routes too.
func TestPluginsOfLiveNodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	now := time.Now()
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "node", Value: "live"}, {Key: "timestamp", Value: now}, {Key: "plugins", Value: bson.A{"B::Plugin", "A::Plugin"}}},
		bson.D{{Key: "node", Value: "dead"}, {Key: "timestamp", Value: now.Add(-time.Hour)}, {Key: "plugins", Value: bson.A{"Dead::Plugin"}}},
		bson.D{{Key: "node", Value: "perl"}, {Key: "timestamp", Value: now}})
	srv := serve(t, db, testToken, func(o *dci.Options) { o.Plugins = []string{"Conf::Plugin"} })
	if st, _, body := call(t, "GET", srv.URL+"/plugins", "", "", ""); st != 200 || body != `["A::Plugin","B::Plugin","Conf::Plugin"]` {
		t.Errorf("GET /plugins: %d %s", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/queues", "application/json", `{"name":"q","plugin":"Dead::Plugin"}`, bearer); st != 400 || body != `{"error":"Unknown plugin","plugin":"Dead::Plugin"}` {
		t.Errorf("a queue of a dead node's plugin: %d %s", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/queues", "application/json", `{"name":"q","plugin":"A::Plugin"}`, bearer); st != 200 {
		t.Errorf("a queue of a live node's plugin: %d %s", st, body)
	}
	// The older routes take the same plugins: not those of queues that
	// exist (a queue's plugin is whatever anyone wrote there).
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "name", Value: "old"}, {Key: "plugin", Value: "Old::Plugin"}})
	if st, _, body := call(t, "GET", srv.URL+"/queue-prototypes-json", "", "", ""); st != 200 ||
		body != `{"A::Plugin":"A::Plugin","B::Plugin":"B::Plugin","Conf::Plugin":"Conf::Plugin"}` {
		t.Errorf("GET /queue-prototypes-json: %d %s", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/start-queue-json", "application/x-www-form-urlencoded", "type=Old%3A%3APlugin&name=q2", bearer); st != 400 || body != `[0,"unknown type"]` {
		t.Errorf("/start-queue-json of a plugin only a queue names: %d %s", st, body)
	}
}

// The JSON as Cpanel::JSON::XS writes it: pretty with 3 spaces and " : ",
// doubles with their fraction, dates of tasks in seconds (search) and of
// nodes in milliseconds, a ctime filter in milliseconds taken as a date,
// also under an operator.
func TestJSONAsPerlWritesIt(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	qid := bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: 1}, {Key: "ctime", Value: ts}, {Key: "mtime", Value: ts},
		{Key: "params", Value: bson.D{{Key: "f", Value: 3.0}, {Key: "s", Value: "a/b\"é"}}}, {Key: "stdout", Value: ""}, {Key: "stderr", Value: "x"}})
	srv := serve(t, db, testToken)
	st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"filter":{"ctime":{"$gte":1767323045000,"$lt":1767323046000}},"options":{"projection":{"_id":0,"queue":0}},"pretty":1}`, "")
	want := "[\n   {\n      \"status\" : 1,\n      \"ctime\" : 1767323045.0,\n      \"mtime\" : 1767323045.0,\n      \"params\" : {\n         \"f\" : 3.0,\n         \"s\" : \"a/b\\\"é\"\n      },\n      \"stdout\" : \"\",\n      \"stderr\" : \"[terse mode]\"\n   }\n]\n"
	if st != 200 || body != want {
		t.Errorf("pretty search: %d\n%s\nwant\n%s", st, body, want)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"filter":{"ctime":1767323045000},"count":1}`, ""); st != 200 || body != `{"count":1}` {
		t.Errorf("ctime in milliseconds: %d %s", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"options":{"limit":101}}`, ""); st != 400 || body != `{"error":"limit cannot exceed 100"}` {
		t.Errorf("limit 101: %d %s", st, body)
	}
	if st, _, body := call(t, "POST", srv.URL+"/tasks/search", "application/json", `{"options":{"batchSize":1}}`, ""); st != 400 {
		t.Errorf("an option den does not take: %d %s", st, body)
	}
}

// findQueue reads the queue named q.
func findQueue(t *testing.T, db *mongo.Database) bson.Raw {
	t.Helper()
	raw, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "name", Value: "q"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Names in a path are decoded (disbatch sends a queue "a b" as
// /queues/a%20b); /tasks/:queue/:collection is split before, so that a
// queue named a/b is /tasks/a%2Fb and its collection the rest.
func TestEscapedNamesInPaths(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	srv := serve(t, db, testToken)
	for _, name := range []string{"a b", "a/b"} {
		body, _ := json.Marshal(map[string]string{"name": name, "plugin": "Disbatch::Plugin::Demo"})
		if st, _, got := call(t, "POST", srv.URL+"/queues", "application/json", string(body), bearer); st != 200 {
			t.Fatalf("create queue %q: %d %s", name, st, got)
		}
	}
	dentest.Insert(t, db.Collection("users"), bson.D{{Key: "u", Value: "ann"}})
	for _, tc := range []struct {
		method, path, body string
		want               string
	}{
		{"POST", "/queues/a%20b", `{"threads":1}`, `"modified_count":1`},
		{"GET", "/queues/a%20b", "", `"name":"a b"`},
		{"GET", "/queues/a%2Fb", "", `"name":"a/b"`},
		{"POST", "/tasks/a%20b", `[{"x":1}]`, `"inserted":[{"index":0`},
		{"POST", "/tasks/a%2Fb", `[{"x":2}]`, `"inserted":[{"index":0`},
		{"POST", "/tasks/a%2Fb/users", `{"filter":{},"params":{"user":"document.u"}}`, `"inserted":[{"index":0`},
	} {
		st, _, got := call(t, tc.method, srv.URL+tc.path, "application/json", tc.body, bearer)
		if st != 200 || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s %s: %d %s; want 200 with %s", tc.method, tc.path, tc.body, st, got, tc.want)
		}
	}
	qid := findQueueNamed(t, db, "a/b")
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}}); n != 2 {
		t.Errorf("%d tasks in queue a/b, want 2", n)
	}
}
