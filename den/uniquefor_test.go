package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A task whose key is held after its end (unique_for) keeps it when a node
// runs it, with unique_until its end plus the hold, written with the
// result; one cancelled while queued gets its mtime plus the hold from the
// sweep, and keeps its key too.
func TestNodeHoldsKeysAfterTheEnd(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	run := dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}}, bson.E{Key: "unique_key", Value: "run"}, bson.E{Key: "unique_for", Value: 3600.0})
	cancelled := dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}}, bson.E{Key: "unique_key", Value: "cancelled"},
		bson.E{Key: "unique_for", Value: 3600.0}, bson.E{Key: "cancel", Value: true})
	startNode(t, db, "n")

	heldAnHour := func(id bson.ObjectID, key string) func() bool {
		return func() bool {
			doc := dentest.Task(t, db, id)
			until, ok := doc.Lookup(queue.FieldUniqueUntil).TimeOK()
			mtime, _ := doc.Lookup("mtime").TimeOK()
			return ok && until.Sub(mtime) == time.Hour && doc.Lookup(queue.FieldUniqueKey).StringValue() == key
		}
	}
	dentest.WaitStatus(t, db, run, 1)
	if !heldAnHour(run, "run")() {
		t.Errorf("the task the node ran: %v, want its key kept and unique_until its end plus 1h", dentest.Task(t, db, run))
	}
	dentest.WaitStatus(t, db, cancelled, -5)
	dentest.Eventually(t, time.Minute, "the cancelled task's key held an hour after its mtime", heldAnHour(cancelled, "cancelled"))
}
