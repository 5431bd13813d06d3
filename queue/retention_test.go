package queue_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// A queue's retention field is read as mongosh and den queue set write
// it; what cannot be read is an error that says which key and why, and
// ParseQueue reports it beside a queue it otherwise reads whole.
func TestDecodeRetention(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	r, err := queue.DecodeRetention(raw(t, bson.D{{Key: "succeeded", Value: "7d"}, {Key: "failed", Value: 7200.0},
		{Key: "cancelled", Value: "keep"}, {Key: "orphaned", Value: "1w2d"}, {Key: "action", Value: "Archive"}, {Key: "reports", Value: "delete"}}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Keep[queue.RetainSucceeded] != 7*day || r.Keep[queue.RetainFailed] != 2*time.Hour || r.Keep[queue.RetainCancelled] != queue.KeepForever ||
		r.Keep[queue.RetainOrphaned] != 9*day || r.Action != queue.RetireArchive || r.Reports != queue.ReportsDelete {
		t.Errorf("decoded %+v", r)
	}
	for _, tc := range []struct {
		v   any
		say string
	}{
		{"7d", "not a document"},
		{bson.D{{Key: "succeded", Value: "1h"}}, "succeded is not a retention key"},
		{bson.D{{Key: "succeeded", Value: 7}}, "succeeded is 7s, below the minimum 1m"},
		{bson.D{{Key: "failed", Value: "soon"}}, `failed "soon" is not a duration`},
		{bson.D{{Key: "failed", Value: true}}, "failed is true (boolean); want a duration"},
		{bson.D{{Key: "orphaned", Value: "1000000w"}}, "above the maximum"},
		{bson.D{{Key: "action", Value: "shred"}}, `action is "shred" (string); want "delete" or "archive"`},
		{bson.D{{Key: "reports", Value: 1}}, `want "keep" or "delete"`},
	} {
		if _, err := queue.DecodeRetention(raw(t, tc.v)); err == nil || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("retention %v: %v, want an error saying %q", tc.v, err, tc.say)
		}
	}
	// The node's default fills in what the queue leaves out; keep wins.
	def := queue.Retention{Keep: map[string]time.Duration{queue.RetainSucceeded: time.Hour, queue.RetainCancelled: time.Hour}, Action: queue.RetireDelete}
	got := queue.Retention{Keep: map[string]time.Duration{queue.RetainCancelled: queue.KeepForever, queue.RetainFailed: day}}.Over(def)
	if got.Keep[queue.RetainSucceeded] != time.Hour || got.Keep[queue.RetainCancelled] != queue.KeepForever || got.Keep[queue.RetainFailed] != day ||
		got.Action != queue.RetireDelete || !got.Removes() {
		t.Errorf("over the default: %+v", got)
	}
	if (queue.Retention{}).Over(queue.Retention{}).Removes() {
		t.Error("no retention anywhere removes tasks")
	}

	doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "q"}, {Key: "constructor", Value: "P"},
		{Key: "maxthreads", Value: 2}, {Key: "retention", Value: bson.D{{Key: "succeeded", Value: "x"}}}})
	q, err := queue.ParseQueue(doc)
	if err != nil || q.MaxThreads != 2 || !strings.Contains(q.RetentionProblem, "retention: succeeded") || q.Retention.Removes() {
		t.Errorf("a queue with a bad retention: %v, %+v", err, q)
	}
}
