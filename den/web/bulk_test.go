package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// bulkPost posts form to /tasks/bulk and returns the status and body.
func bulkPost(t *testing.T, base string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/tasks/bulk", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// bulkTasks is a queue "bulk" with three queued tasks and one that
// succeeded (which cancel leaves alone).
func bulkTasks(t *testing.T) (*mongo.Database, bson.ObjectID, []bson.ObjectID, bson.ObjectID) {
	t.Helper()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "bulk", "Disbatch::Plugin::Command", 0, "fifo")
	ids := dentest.Tasks(t, db, q, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}}, bson.D{{Key: "i", Value: 3}}, bson.D{{Key: "i", Value: 4}})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusSucceeded}}}})
	return db, q, ids[1:], ids[0]
}

var uptoField = regexp.MustCompile(`name="upto" value="([0-9a-f]{24})"`)

// Without the token, a bulk action is refused and changes nothing.
func TestBulkRefusedWithoutToken(t *testing.T) {
	t.Parallel()
	db, _, queued, _ := bulkTasks(t)
	srv := serve(t, db, testToken)
	code, _ := bulkPost(t, srv.URL, url.Values{"action": {"cancel"}, "queue": {"bulk"}, "confirm": {"3"}}, nil)
	if code != http.StatusForbidden {
		t.Errorf("no token: %d, want 403", code)
	}
	for _, id := range queued {
		if cancelFlag(t, db, id) {
			t.Errorf("task %s cancelled without the token", id.Hex())
		}
	}
}

// The first step counts the tasks cancel may change and binds the newest;
// the confirmation cancels those, not a task inserted in between, and
// leaves the task that had ended alone.
func TestBulkCancelConfirmsCountAndBound(t *testing.T) {
	t.Parallel()
	db, q, queued, ended := bulkTasks(t)
	srv := serve(t, db, testToken)
	form := url.Values{"action": {"cancel"}, "queue": {"bulk"}, "token": {testToken}}
	code, body := bulkPost(t, srv.URL, form, nil)
	if code != 200 || !strings.Contains(body, "This will cancel 3 tasks (those matching: queue bulk, up to task ID") {
		t.Fatalf("first step %d: %s", code, body)
	}
	m := uptoField.FindStringSubmatch(body)
	if m == nil || m[1] != queued[2].Hex() {
		t.Fatalf("upto %v, want the newest queued task %s", m, queued[2].Hex())
	}
	if !strings.Contains(body, `name="confirm" value="3"`) {
		t.Errorf("the Confirm button does not carry confirm=3")
	}
	for _, id := range queued {
		if cancelFlag(t, db, id) {
			t.Fatalf("the first step cancelled %s", id.Hex())
		}
	}
	later := dentest.Tasks(t, db, q, bson.D{{Key: "i", Value: 5}})[0]
	form.Set("upto", m[1])
	form.Set("confirm", "3")
	code, body = bulkPost(t, srv.URL, form, nil)
	if code != 200 || !strings.Contains(body, "Cancelled 3 of 3.") {
		t.Fatalf("confirm %d: %s", code, body)
	}
	for _, id := range queued {
		if !cancelFlag(t, db, id) {
			t.Errorf("task %s not cancelled", id.Hex())
		}
	}
	if cancelFlag(t, db, later) {
		t.Errorf("the task inserted after the first step was cancelled")
	}
	if cancelFlag(t, db, ended) {
		t.Errorf("the task that had ended was flagged")
	}
}

// A confirmation whose count is no longer the count acts on nothing and
// asks again with the new count; a script gets 409.
func TestBulkWrongConfirmActsOnNothing(t *testing.T) {
	t.Parallel()
	db, _, queued, _ := bulkTasks(t)
	srv := serve(t, db, testToken)
	form := url.Values{"action": {"cancel"}, "queue": {"bulk"}, "token": {testToken}, "confirm": {"2"}}
	code, body := bulkPost(t, srv.URL, form, nil)
	if code != 200 || !strings.Contains(body, "it is 3 now") || !strings.Contains(body, `name="confirm" value="3"`) {
		t.Errorf("wrong confirm %d: %s", code, body)
	}
	code, body = bulkPost(t, srv.URL, url.Values{"action": {"cancel"}, "queue": {"bulk"}, "confirm": {"4"}},
		http.Header{"Authorization": {"Bearer " + testToken}})
	if code != http.StatusConflict || !strings.Contains(body, `"matched":3`) {
		t.Errorf("wrong confirm, script: %d %s", code, body)
	}
	for _, id := range queued {
		if cancelFlag(t, db, id) {
			t.Errorf("task %s cancelled by a wrong confirmation", id.Hex())
		}
	}
}

type bulkAnswer struct {
	Action  string `json:"action"`
	Matched int64  `json:"matched"`
	Done    int    `json:"done"`
	Upto    string `json:"upto"`
}

func decodeBulk(t *testing.T, body string) bulkAnswer {
	t.Helper()
	var a bulkAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return a
}

// A script (Bearer) gets JSON: without confirm the count and bound and
// nothing done; with them, what was done.
func TestBulkJSONForBearer(t *testing.T) {
	t.Parallel()
	db, _, queued, _ := bulkTasks(t)
	srv := serve(t, db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	if _, list := get(t, client(nil), srv.URL+"/tasks?status=queued"); strings.Contains(list, "Cancel these") {
		t.Errorf("the task list offers bulk actions to a visitor without the token")
	}
	req, _ := http.NewRequest("GET", srv.URL+"/tasks?status=queued", nil)
	req.Header = bearer
	resp, err := client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(list), "Cancel these") || !strings.Contains(string(list), "Retry these") || !strings.Contains(string(list), `name="status" value="queued"`) {
		t.Errorf("the task list lacks the bulk buttons carrying its filter")
	}
	code, body := bulkPost(t, srv.URL, url.Values{"action": {"cancel"}, "status": {"queued"}}, bearer)
	first := decodeBulk(t, body)
	if code != http.StatusBadRequest || first.Matched != 3 || first.Done != 0 || first.Upto != queued[2].Hex() {
		t.Fatalf("first step %d: %s", code, body)
	}
	code, body = bulkPost(t, srv.URL, url.Values{"action": {"cancel"}, "status": {"queued"}, "confirm": {"3"}, "upto": {first.Upto}}, bearer)
	if a := decodeBulk(t, body); code != 200 || a != (bulkAnswer{Action: "cancel", Matched: 3, Done: 3, Upto: first.Upto}) {
		t.Fatalf("confirm %d: %s", code, body)
	}
	for _, id := range queued {
		if !cancelFlag(t, db, id) {
			t.Errorf("task %s not cancelled", id.Hex())
		}
	}
}

// Retrying the failed tasks queues them again; the others stay as they
// were.
func TestBulkRetryFailed(t *testing.T) {
	t.Parallel()
	db, _, queued, ended := bulkTasks(t)
	for _, id := range queued[:2] {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: queue.StatusFailed}, {Key: "node", Value: "n1"}}}})
	}
	srv := serve(t, db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	form := url.Values{"action": {"retry"}, "queue": {"bulk"}, "status": {"failed"}}
	_, body := bulkPost(t, srv.URL, form, bearer)
	first := decodeBulk(t, body)
	if first.Matched != 2 || first.Upto != queued[1].Hex() {
		t.Fatalf("first step: %s", body)
	}
	form.Set("confirm", "2")
	form.Set("upto", first.Upto)
	code, body := bulkPost(t, srv.URL, form, bearer)
	if a := decodeBulk(t, body); code != 200 || a.Done != 2 {
		t.Fatalf("confirm %d: %s", code, body)
	}
	for _, id := range queued[:2] {
		if st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK(); st != queue.StatusQueued {
			t.Errorf("task %s: status %d, want queued", id.Hex(), st)
		}
	}
	if st, _ := dentest.Task(t, db, ended).Lookup("status").AsInt64OK(); st != queue.StatusSucceeded {
		t.Errorf("the succeeded task: status %d", st)
	}
}
