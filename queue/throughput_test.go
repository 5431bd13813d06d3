package queue_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// EndedSince counts only finished tasks whose mtime is in the window, per
// queue and status.
func TestEndedSince(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStores(db)
	qa := dentest.Queue(t, db, "a", "P", 1, "fifo")
	qb := dentest.Queue(t, db, "b", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, qa, params(5)...)
	idb := dentest.Tasks(t, db, qb, params(1)...)
	now := time.Now()
	set := func(id bson.ObjectID, status int, mtime time.Time) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: status}, {Key: "mtime", Value: mtime}}}})
	}
	set(ids[0], 1, now.Add(-time.Minute))
	set(ids[1], 2, now.Add(-2*time.Minute))
	set(ids[2], 1, now.Add(-time.Hour)) // too old
	set(ids[3], 0, now)                 // running
	set(idb[0], 1, now)
	got, err := store.Operator.EndedSince(dentest.Context(t), now.Add(-15*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if a := got[qa]; a.Group(queue.GroupDone) != 1 || a.Group(queue.GroupFailed) != 1 || a.Total() != 2 {
		t.Errorf("queue a: %+v; want 1 done and 1 failed", a)
	}
	if b := got[qb]; b.Total() != 1 {
		t.Errorf("queue b: %+v; want 1", b)
	}
}
