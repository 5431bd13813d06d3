package dci_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// testdata/perl-dci-answers.jsonl is what the Perl DCI (Disbatch::Web
// 4.000, on Debian 12's Perl with the MongoDB driver made to behave as the
// 1.x driver Disbatch 4 was written against: ObjectIds with their value,
// dates as DateTime, {"$oid"} in JSON) answered to a sequence of requests
// covering every route, on a database seeded as seedLikePerl seeds it:
// one JSON line per request (name, method, path, Content-Type, body;
// status and answer). docs/compatibility.md says how it was recorded.
//
// TestAnswersAsThePerlDCI sends den the same requests, in the same order,
// on a database seeded the same way, and compares each answer with the
// Perl DCI's as JSON: key order aside (Perl's hashes have none), ids
// matched by first appearance (ids the Perl DCI made stand for those den
// made at the same point), ctime and mtime values of tasks created during
// the run left out (they are the clock's). Where den differs by decision
// (docs/compatibility.md), the test says how and checks den's answer.

// perlAnswer is one line of the recording.
type perlAnswer struct {
	Name, Method, Path, CT, Body string
	Status                       int
	Resp                         string
}

func readAnswers(t *testing.T, file string) []perlAnswer {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []perlAnswer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a perlAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// seedLikePerl seeds db as the recording's database was: two node
// documents, a finished task with its stdout in GridFS, and a users
// collection for the routes that make tasks from another collection.
func seedLikePerl(t *testing.T, db *mongo.Database) {
	t.Helper()
	id := func(h string) bson.ObjectID {
		o, err := bson.ObjectIDFromHex(h)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "_id", Value: id("aaaaaaaaaaaaaaaaaaaaaaa1")}, {Key: "node", Value: "perl01"}, {Key: "timestamp", Value: ts}},
		bson.D{{Key: "_id", Value: id("aaaaaaaaaaaaaaaaaaaaaaa2")}, {Key: "node", Value: "den01"}, {Key: "timestamp", Value: ts}, {Key: "maxthreads", Value: 4}, {Key: "queues", Value: bson.A{}}})
	file, task := id("bbbbbbbbbbbbbbbbbbbbbbb1"), id("ccccccccccccccccccccccc1")
	dentest.Insert(t, db.Collection("tasks.files"), bson.D{{Key: "_id", Value: file}, {Key: "filename", Value: "stdout"}, {Key: "length", Value: 11},
		{Key: "chunkSize", Value: 261120}, {Key: "uploadDate", Value: ts}, {Key: "metadata", Value: bson.D{{Key: "task_id", Value: task}}}})
	dentest.Insert(t, db.Collection("tasks.chunks"), bson.D{{Key: "files_id", Value: file}, {Key: "n", Value: 0}, {Key: "data", Value: "hello world"}})
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: task}, {Key: "queue", Value: id("ddddddddddddddddddddddd1")},
		{Key: "status", Value: 1}, {Key: "node", Value: "perl01"}, {Key: "params", Value: bson.D{{Key: "x", Value: 1}}},
		{Key: "ctime", Value: ts}, {Key: "mtime", Value: ts}, {Key: "stdout", Value: file}, {Key: "stderr", Value: "some error"},
		{Key: "history", Value: bson.A{bson.D{{Key: "ended", Value: ts}, {Key: "status", Value: 2}, {Key: "ok", Value: true}}}},
		{Key: "cancel", Value: false}, {Key: "n64", Value: int64(1099511627776)}, {Key: "f", Value: 1.5}, {Key: "f2", Value: 2.0}})
	dentest.Insert(t, db.Collection("users"),
		bson.D{{Key: "username", Value: "ashley"}, {Key: "migration", Value: "foo"}, {Key: "n", Value: 1}},
		bson.D{{Key: "username", Value: "matt"}, {Key: "migration", Value: "foo"}, {Key: "n", Value: 2}},
		bson.D{{Key: "username", Value: "x"}, {Key: "migration", Value: "bar"}, {Key: "n", Value: 3}})
}

var hexID = regexp.MustCompile(`[0-9a-f]{24}`)

// fixedID are the seeded ids, the same in both runs.
var fixedID = regexp.MustCompile(`^(a{23}[12]|b{23}1|c{23}1|d{23}1)$`)

// labels names ids by their first appearance.
type labels struct {
	byID    map[string]string
	byLabel map[string]string
}

func newLabels() *labels { return &labels{byID: map[string]string{}, byLabel: map[string]string{}} }

func (l *labels) label(id string) string {
	if fixedID.MatchString(id) {
		return id
	}
	if s, ok := l.byID[id]; ok {
		return s
	}
	s := "<id" + string(rune('A'+len(l.byID)%26)) + strings.Repeat("'", len(l.byID)/26) + ">"
	l.byID[id], l.byLabel[s] = s, id
	return s
}

// normalize labels ids and leaves out the clock's values.
func normalize(v any, l *labels) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			switch k {
			case "ctime", "mtime", "ctime_str", "mtime_str":
				if _, isObj := x.(map[string]any); !isObj && !isFixedTime(x) {
					out[k] = "<time>"
					continue
				}
			}
			out[k] = normalize(x, l)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x, l)
		}
		return out
	case string:
		return hexID.ReplaceAllStringFunc(v, l.label)
	}
	return v
}

// isFixedTime reports whether a time value is the seeded task's (2026-01-02T03:04:05.678Z).
func isFixedTime(v any) bool {
	switch v := v.(type) {
	case float64:
		return v == 1767323045.678 || v == 1767323045
	case string:
		return v == "2026-01-02T03:04:05"
	}
	return false
}

func decodeAny(t *testing.T, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s // a plain text answer
	}
	return v
}

// denDiffers are the answers den gives by decision where the Perl DCI
// answered otherwise (docs/compatibility.md), keyed by request name: den's
// status and answer, normalized as the comparison has them, and what the
// Perl DCI answered, to keep the list honest.
var denDiffers = map[string]struct {
	status int
	answer string
	perl   string // a part of the Perl DCI's answer
}{
	"node-unknown":                     {404, `{"error":"node not found","node":"nosuch"}`, `Internal Server Error`},
	"queue-unknown":                    {404, `{"error":"queue not found","queue":"nosuch"}`, `Internal Server Error`},
	"queue-set-unknown-queue":          {400, `{"MongoDB::UpdateResult":{"matched_count":0,"modified_count":0,"upserted_id":null,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}`, `MongoDB::UpdateResult=HASH(`},
	"queue-set-unknown-id":             {400, `{"MongoDB::UpdateResult":{"matched_count":0,"modified_count":0,"upserted_id":null,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}`, `MongoDB::UpdateResult=HASH(`},
	"set-queue-attr-json-unknown":      {400, `{"success":0,"MongoDB::UpdateResult":{"matched_count":0,"modified_count":0,"upserted_id":null,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}`, `MongoDB::UpdateResult=HASH(`},
	"delete-queue-json-again":          {400, `[0,{"success":0,"MongoDB::DeleteResult":{"deleted_count":0,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}]`, `MongoDB::DeleteResult=HASH(`},
	"queue-delete-unknown":             {400, `{"MongoDB::DeleteResult":{"deleted_count":0,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}`, `MongoDB::DeleteResult=HASH(`},
	"tasks-from-collection-none":       {400, `{"MongoDB::InsertManyResult":{"acknowledged":1,"inserted":[],"write_errors":[],"write_concern_errors":[]},"error":"no tasks: the filter matched no document of collection users"}`, `"Unknown error"`},
	"search-bad-oid":                   {400, `{"error":"Bad OID passed: \"nosuch\" is not an ObjectId: want 24 hexadecimal digits"}`, `Bad OID passed: Invalid 'oid' field`},
	"search-bad-oid2":                  {400, `{"error":"Bad OID passed: \"xyz\" is not an ObjectId: want 24 hexadecimal digits"}`, `Bad OID passed: Invalid 'oid' field`},
	"queue-create-tasks-json-not-json": {200, `[0,"not JSON: invalid character 'o' in literal null (expecting 'u')"]`, `'null' expected, at character offset 0`},
	"search-tasks-json-bad-json":       {200, `[0,"not JSON: invalid character 'o' in literal null (expecting 'u')"]`, `'null' expected, at character offset 0`},
	"not-found":                        {404, `{"error":"not found: GET /nosuch.json is no route of the Disbatch web API"}`, `This is the void`},
	// Parameters in the query string (TestQueryParametersAsParseParamsMeant).
	"query-queue-create":       {200, `{"MongoDB::InsertOneResult":{"inserted_id":{"$oid":"<idA>"},"write_errors":[],"write_concern_errors":[]},"id":{"$oid":"<idA>"}}`, `This is the void`},
	"query-queue-set":          {200, `{"MongoDB::UpdateResult":{"matched_count":1,"modified_count":1,"upserted_id":null,"write_errors":[],"write_concern_errors":[]}}`, `"no params"`},
	"query-queue-get":          {200, `{"id":"<idA>","plugin":"Disbatch::Plugin::Demo","name":"q9","threads":3,"queued":0,"running":0,"completed":0}`, `Internal Server Error`},
	"query-node-set":           {200, `{"MongoDB::UpdateResult":{"matched_count":1,"modified_count":1,"upserted_id":null,"write_errors":[],"write_concern_errors":[]}}`, `"No params"`},
	"query-node-get":           {200, `{"_id":{"$oid":"aaaaaaaaaaaaaaaaaaaaaaa2"},"node":"den01","maxthreads":2,"id":"aaaaaaaaaaaaaaaaaaaaaaa2"}`, `"node":"den01"`},
	"query-search-count":       {200, `{"count":0}`, `params must be a JSON array`},
	"query-search-filter-text": {400, `{"error":"filter and options must be name/value objects"}`, `params must be a JSON array`},
	"query-body-wins":          {200, `{"MongoDB::UpdateResult":{"matched_count":1,"modified_count":1,"upserted_id":null,"write_errors":[],"write_concern_errors":[]}}`, `MongoDB::UpdateResult=HASH(`},
	"query-queue-get-body":     {200, `{"id":"<idA>","plugin":"Disbatch::Plugin::Demo","name":"q9","threads":4,"queued":0,"running":0,"completed":0}`, `Internal Server Error`},
	"query-other-type":         {200, `{"MongoDB::UpdateResult":{"matched_count":1,"modified_count":1,"upserted_id":null,"write_errors":[],"write_concern_errors":[]}}`, `"no params"`},
	"query-queue-get-after":    {200, `{"id":"<idA>","plugin":"Disbatch::Plugin::Demo","name":"q9","threads":6,"queued":0,"running":0,"completed":0}`, `Internal Server Error`},
	"query-start-queue-json":   {200, `[1,{"$oid":"<idB>"},{"success":1,"MongoDB::InsertOneResult":{"inserted_id":{"$oid":"<idB>"},"write_errors":[],"write_concern_errors":[]}}]`, `This is the void`},
	"query-queues":             {200, `[{"id":"<idA>","plugin":"Disbatch::Plugin::Demo","name":"q9","threads":6,"queued":0,"running":0,"completed":0},{"id":"<idB>","plugin":"Disbatch::Plugin::Demo","name":"q10","threads":null,"queued":0,"running":0,"completed":0}]`, `[]`},
	"query-delete":             {200, `{"MongoDB::DeleteResult":{"deleted_count":1,"write_errors":[],"write_concern_errors":[]}}`, `MongoDB::DeleteResult=HASH(`},
	"query-delete-q10":         {200, `{"MongoDB::DeleteResult":{"deleted_count":1,"write_errors":[],"write_concern_errors":[]}}`, `MongoDB::DeleteResult=HASH(`},
}

// asDenWrites turns what the Perl DCI wrote into what den writes by
// decision: a queued task's node is -1 (the protocol's), not null; a
// queue's threads, posted as a form's text, is stored as a number.
func asDenWrites(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = asDenWrites(x)
		}
		if st, ok := v["status"].(float64); ok && st == -2 {
			if _, has := v["node"]; has && v["node"] == nil {
				out["node"] = -1.0
			}
		}
		if s, ok := v["threads"].(string); ok && regexp.MustCompile(`^\d+$`).MatchString(s) {
			var n float64
			json.Unmarshal([]byte(s), &n)
			out["threads"] = n
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = asDenWrites(x)
		}
		return out
	}
	return v
}

func TestAnswersAsThePerlDCI(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	seedLikePerl(t, db)
	replay(t, db, "testdata/perl-dci-answers.jsonl")
}

// testdata/perl-dci-query-answers.jsonl is what the Perl DCI answered to
// requests whose parameters are in the query string, on a database
// holding only the node document den01: parse_params reads the query
// when the body is neither a form nor JSON, but the Limper of its time
// matched routes against the path with its query and never set the query
// parameters, so these requests found no route (404), the wrong one
// (/tasks/search?count=1 is /tasks/:queue) or no parameters. den reads
// them as parse_params meant (docs/compatibility.md); each answer is in
// denDiffers, with the Perl DCI's.
func TestQueryParametersAsParseParamsMeant(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	id, _ := bson.ObjectIDFromHex("aaaaaaaaaaaaaaaaaaaaaaa2")
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "_id", Value: id}, {Key: "node", Value: "den01"}})
	replay(t, db, "testdata/perl-dci-query-answers.jsonl")
}

// replay sends den the recording's requests in order and compares each
// answer with the Perl DCI's, or with den's by decision (denDiffers).
func replay(t *testing.T, db *mongo.Database, file string) {
	t.Helper()
	srv := serve(t, db, testToken)
	perlIDs, denIDs := newLabels(), newLabels()
	for _, a := range readAnswers(t, file) {
		// Perl's ids in the request become den's of the same label.
		path := hexID.ReplaceAllStringFunc(a.Path, func(id string) string {
			if s, ok := perlIDs.byID[id]; ok {
				return denIDs.byLabel[s]
			}
			return id
		})
		body := hexID.ReplaceAllStringFunc(a.Body, func(id string) string {
			if s, ok := perlIDs.byID[id]; ok {
				return denIDs.byLabel[s]
			}
			return id
		})
		req, err := http.NewRequest(a.Method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if a.CT != "" {
			req.Header.Set("Content-Type", a.CT)
		}
		req.SetBasicAuth("someone", testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		perl := normalize(asDenWrites(decodeAny(t, a.Resp)), perlIDs)
		den := normalize(decodeAny(t, string(got)), denIDs)
		if d, ok := denDiffers[a.Name]; ok {
			if !strings.Contains(a.Resp, d.perl) {
				t.Errorf("%s: the recording's answer %s no longer has %q: update denDiffers", a.Name, a.Resp, d.perl)
			}
			want := normalize(decodeAny(t, d.answer), newLabels())
			if res.StatusCode != d.status || !reflect.DeepEqual(den, want) {
				t.Errorf("%s %s %s %s: den answered %d %s, want (by decision) %d %s", a.Name, a.Method, path, body, res.StatusCode, got, d.status, d.answer)
			}
			continue
		}
		if a.Name == "search-limit" {
			// Ids the Perl DCI's forked workers make in the same second
			// are not in creation order, so which task is the second in
			// _id order differs; den's ids are: it is the second task
			// made (<idD>: after the queues <idA> and <idB>, and <idC>).
			perl = []any{map[string]any{"_id": map[string]any{"$oid": "<idD>"}}}
			if list, ok := den.([]any); ok && len(list) == 1 {
				den = []any{map[string]any{"_id": list[0].(map[string]any)["_id"]}}
			}
		}
		if a.Path == "/tasks/search" && !strings.Contains(a.Body, "sort") && !strings.Contains(a.Body, "limit") && !strings.Contains(a.Body, "skip") {
			// A search with no sort answers in the server's order, which
			// MongoDB does not promise (the recording's is its insertion
			// order; the development server's fast paths give _id order):
			// the same tasks, in any order.
			perl, den = anyOrder(perl), anyOrder(den)
		}
		if res.StatusCode != a.Status || !reflect.DeepEqual(den, perl) {
			pj, _ := json.Marshal(perl)
			dj, _ := json.Marshal(den)
			t.Errorf("%s: %s %s %s\n Perl DCI: %d %s\n den:      %d %s", a.Name, a.Method, path, body, a.Status, pj, res.StatusCode, dj)
		}
	}
}

// anyOrder puts a list of answers in one order, by their JSON, so that
// two lists of the same answers in different orders compare equal.
func anyOrder(v any) any {
	list, ok := v.([]any)
	if !ok {
		return v
	}
	type keyed struct {
		key string
		v   any
	}
	ks := make([]keyed, len(list))
	for i, x := range list {
		b, _ := json.Marshal(x)
		ks[i] = keyed{string(b), x}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = k.v
	}
	return out
}
