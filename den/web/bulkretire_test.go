package web_test

import (
	"net/http"
	"net/url"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Purge and archive of a filtered selection: the first step counts the
// ended tasks and binds the newest, changing nothing; a wrong count does
// nothing; the confirmation deletes (purge) or moves into tasks_archive
// (archive) those, not a task that ended after the count, nor a queued
// one, and the queue's counts follow. Without the token or the CSRF field
// nothing happens.
func TestBulkPurgeAndArchive(t *testing.T) {
	t.Parallel()
	db, q, queued, ended := bulkTasks(t)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: queued[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusFailed}}}})
	srv := serve(t, db, testToken)
	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	inTasks := func(id bson.ObjectID) bool {
		return dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}) == 1
	}
	jar, _ := loggedIn(t, srv.URL)
	for _, c := range []struct {
		name   string
		header http.Header
		jar    bool
	}{{"no token", nil, false}, {"cookie without CSRF", nil, true}} {
		cl := client(nil)
		if c.jar {
			cl = client(jar)
		}
		if code := post(t, cl, srv.URL+"/tasks/bulk", url.Values{"action": {"purge"}, "queue": {"bulk"}, "confirm": {"2"}}, c.header); code != 403 {
			t.Errorf("purge, %s: %d, want 403", c.name, code)
		}
	}
	if !inTasks(ended) || !inTasks(queued[0]) {
		t.Fatal("a refused purge removed tasks")
	}

	form := url.Values{"action": {"archive"}, "queue": {"bulk"}}
	_, body := bulkPost(t, srv.URL, form, bearer)
	first := decodeBulk(t, body)
	if first.Matched != 2 || first.Upto != queued[0].Hex() || first.Done != 0 || !inTasks(ended) {
		t.Fatalf("archive, first step: %s", body)
	}
	// A task that ends after the count is left out by the bound.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: queued[2]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusCancelled}}}})
	form.Set("upto", first.Upto)
	form.Set("confirm", "3")
	if code, body := bulkPost(t, srv.URL, form, bearer); code != http.StatusConflict || !inTasks(ended) {
		t.Fatalf("archive with a wrong count: %d %s", code, body)
	}
	form.Set("confirm", "2")
	code, body := bulkPost(t, srv.URL, form, bearer)
	if a := decodeBulk(t, body); code != 200 || a != (bulkAnswer{Action: "archive", Matched: 2, Done: 2, Upto: first.Upto}) {
		t.Fatalf("archive: %d %s", code, body)
	}
	if inTasks(ended) || inTasks(queued[0]) || !inTasks(queued[1]) || !inTasks(queued[2]) {
		t.Error("archive removed other tasks than the two counted")
	}
	if dentest.Count(t, db.Collection(queue.ArchiveCollection), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{ended, queued[0]}}}}}) != 2 {
		t.Error("the archived tasks are not in tasks_archive")
	}

	// Purge: the cancelled one now, the queued one never.
	purge := url.Values{"action": {"purge"}, "queue": {"bulk"}}
	_, body = bulkPost(t, srv.URL, purge, bearer)
	first = decodeBulk(t, body)
	if first.Matched != 1 || first.Upto != queued[2].Hex() {
		t.Fatalf("purge, first step: %s", body)
	}
	purge.Set("upto", first.Upto)
	purge.Set("confirm", "1")
	if code, body := bulkPost(t, srv.URL, purge, bearer); code != 200 || decodeBulk(t, body).Done != 1 || inTasks(queued[2]) || !inTasks(queued[1]) {
		t.Fatalf("purge: %d %s", code, body)
	}
	raw, _ := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: q}}).Raw()
	if total, _ := raw.Lookup("count_total").AsInt64OK(); total != 1 {
		t.Errorf("count_total %d after three tasks removed of four, want 1", total)
	}
}
