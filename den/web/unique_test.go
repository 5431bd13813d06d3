package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// The page's retry of an ended task whose unique key another unfinished
// task of its queue holds is refused, 409, naming the holder; once the
// holder has ended it goes back with its key.
func TestRetryOfAHeldKeyIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	tasks := f.db.Collection("tasks")
	if err := queue.NewStore(f.db).EnsureUniqueKeys(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.done}}, bson.D{{Key: "$set", Value: bson.D{{Key: "unique_key_freed", Value: "k"}}}})
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.waiting}}, bson.D{{Key: "$set", Value: bson.D{{Key: "unique_key", Value: "k"}}}})
	retry := func() (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/tasks/"+f.done.Hex()+"/retry", strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body struct{ Error string }
		json.Unmarshal(b, &body)
		return resp.StatusCode, body.Error
	}
	if code, msg := retry(); code != http.StatusConflict || !strings.Contains(msg, f.waiting.Hex()) || !strings.Contains(msg, `"k"`) {
		t.Fatalf("retry of a held key: %d %q; want 409 naming the key and task %s", code, msg, f.waiting.Hex())
	}
	dentest.Update(t, tasks, bson.D{{Key: "_id", Value: f.waiting}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -5}}}, {Key: "$rename", Value: bson.D{{Key: "unique_key", Value: "unique_key_freed"}}}})
	if code, msg := retry(); code != 200 {
		t.Fatalf("retry once the key is free: %d %q", code, msg)
	}
	if doc := dentest.Task(t, f.db, f.done); doc.Lookup("unique_key").StringValue() != "k" || doc.Lookup("status").AsInt64() != -2 {
		t.Fatalf("retried task %v: want queued with its key", doc)
	}
}
