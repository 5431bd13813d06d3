package queue_test

import (
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A sweep's updates of many tasks (the queued tasks whose cancel is set,
// the keys of ended tasks) are sent only when a task matches: the
// development server reads every task for an update it cannot push down
// (3.6 s each among 100,000 tasks), and answers the find that asks
// first from PostgreSQL. When one matches, the update is made.
func TestSweepUpdatesOnlyWhatMatches(t *testing.T) {
	t.Parallel()
	var cancels, frees atomic.Int64
	p := dentest.Faults(t, 1, dentest.Counting("update", "tasks", "cancelled before it started", &cancels),
		dentest.Counting("update", "tasks", "$rename", &frees))
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, direct, "q", "P", 1, queue.SortFIFO)
	dentest.Tasks(t, direct, qid, bson.D{}, bson.D{})
	node := queue.NewStore(db)
	keys := queue.NewStore(db)
	for range 3 {
		if n, err := node.CancelQueued(ctx, time.Now()); err != nil || n != 0 {
			t.Fatalf("cancel queued: %d, %v; want 0", n, err)
		}
		if n, err := keys.FreeEnded(ctx, bson.ObjectID{}, "", time.Now()); err != nil || n != 0 {
			t.Fatalf("free ended keys: %d, %v; want 0", n, err)
		}
	}
	if c, f := cancels.Load(), frees.Load(); c != 0 || f != 0 {
		t.Errorf("with nothing to write, the sweep sent %d cancels and %d frees; want none", c, f)
	}
	// One of each to write: each is written.
	cancelled := dentest.TaskWith(t, direct, qid, bson.D{}, bson.E{Key: queue.FieldCancel, Value: true})
	ended := bson.NewObjectID()
	dentest.Insert(t, direct.Collection("tasks"), bson.D{{Key: "_id", Value: ended}, {Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusSucceeded},
		{Key: "node", Value: "n"}, {Key: "parameters", Value: bson.D{}}, {Key: queue.FieldUniqueKey, Value: "k"}})
	if n, err := node.CancelQueued(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("cancel queued: %d, %v; want 1", n, err)
	}
	if n, err := keys.FreeEnded(ctx, bson.ObjectID{}, "", time.Now()); err != nil || n != 1 {
		t.Fatalf("free ended keys: %d, %v; want 1", n, err)
	}
	if c, f := cancels.Load(), frees.Load(); c != 1 || f != 1 {
		t.Errorf("with one of each to write, the sweep sent %d cancels and %d frees; want one each", c, f)
	}
	var doc struct {
		Status int `bson:"status"`
	}
	if err := direct.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: cancelled}}).Decode(&doc); err != nil || doc.Status != queue.StatusCancelled {
		t.Errorf("the task whose cancel was set: status %d (%v), want %d", doc.Status, err, queue.StatusCancelled)
	}
	if n, err := direct.Collection("tasks").CountDocuments(ctx, bson.D{{Key: "_id", Value: ended}, {Key: queue.FieldUniqueKey, Value: bson.D{{Key: "$exists", Value: true}}}}); err != nil || n != 0 {
		t.Errorf("the ended task still holds its key (%d, %v)", n, err)
	}
}
