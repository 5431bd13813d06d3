package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// A paused queue is never claimed by a den node, even when its maxthreads
// is written back by hand while the pause mark is there, while the node
// goes on with other queues; resumed, its tasks run.
func TestPausedQueueIsNotClaimed(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	paused := dentest.Queue(t, db, "paused", demo.Name, 2, "fifo")
	other := dentest.Queue(t, db, "other", demo.Name, 2, "fifo")
	if o, err := store.PauseQueue(dentest.Context(t), paused, "test", time.Now()); err != nil || o != queue.PauseDone {
		t.Fatalf("pause: %v, %v", o, err)
	}
	// Someone writes a limit over the pause by hand: the mark still holds.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: paused}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 2}}}})
	held := dentest.Tasks(t, db, paused, bson.D{{Key: "commands", Value: "a"}})[0]
	startNode(t, db, "pauser")
	// A task of another queue, inserted after the held one, runs: the node
	// has claimed past the paused queue's task in passes that saw it.
	first := dentest.Tasks(t, db, other, bson.D{{Key: "commands", Value: "a"}})[0]
	dentest.WaitStatus(t, db, first, 1)
	later := dentest.Tasks(t, db, other, bson.D{{Key: "commands", Value: "a"}})[0]
	dentest.WaitStatus(t, db, later, 1)
	if st, _ := dentest.Task(t, db, held).Lookup("status").AsInt64OK(); st != -2 {
		t.Fatalf("the paused queue's task has status %d, want -2 (queued)", st)
	}
	if o, err := store.ResumeQueue(dentest.Context(t), paused); err != nil || o != queue.PauseDone {
		t.Fatalf("resume: %v, %v", o, err)
	}
	dentest.WaitStatus(t, db, held, 1)
}
