package queue_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// The census's deleted queues are the queue ids it counted tasks of that
// no queue document has, a document that cannot be used included; the
// newest first.
func TestCensusDeleted(t *testing.T) {
	t.Parallel()
	live, broken, older, newer, empty := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	counts := func(n int64) queue.StatusCounts {
		return queue.StatusCounts{ByStatus: map[int]int64{queue.StatusSucceeded: n}}
	}
	c := &queue.Census{Queues: map[bson.ObjectID]queue.StatusCounts{live: counts(1), broken: counts(2), older: counts(3), newer: counts(4), empty: counts(0)}}
	_, raw, _ := bson.MarshalValue(broken)
	got := c.Deleted([]queue.Queue{{ID: live}}, []queue.MalformedQueue{{ID: bson.RawValue{Type: bson.TypeObjectID, Value: raw}}, {ID: "not an id"}})
	if len(got) != 2 || got[0].ID != newer || got[1].ID != older || got[0].Counts.Total() != 4 || got[1].Counts.Total() != 3 {
		t.Errorf("deleted queues: %+v, want %s (4 tasks) then %s (3)", got, newer.Hex(), older.Hex())
	}
}
