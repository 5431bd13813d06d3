package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A node frees the unique key of every task that ends: the one it runs, in
// its result's update; one that someone else finished (a Perl node) or
// that was cancelled while queued, in its sweep. It makes the index that
// holds the keys when it starts: a user's second insert of a held key is
// refused.
func TestNodeFreesUniqueKeys(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	run := dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}}, bson.E{Key: "unique_key", Value: "run"})
	cancelled := dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}}, bson.E{Key: "unique_key", Value: "cancelled"}, bson.E{Key: "cancel", Value: true})
	// One a Perl node finished (it leaves unique_key as it is), and one
	// waiting for another (-4), which holds its key.
	perl, blocked := bson.NewObjectID(), bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"),
		bson.D{{Key: "_id", Value: perl}, {Key: "queue", Value: qid}, {Key: "status", Value: 1}, {Key: "node", Value: "perl01"}, {Key: "unique_key", Value: "perl"}},
		bson.D{{Key: "_id", Value: blocked}, {Key: "queue", Value: qid}, {Key: "status", Value: -4}, {Key: "node", Value: -1}, {Key: "unique_key", Value: "blocked"}})
	startNode(t, db, "n")

	freed := func(id bson.ObjectID, key string) func() bool {
		return func() bool {
			doc := dentest.Task(t, db, id)
			return doc.Lookup(queue.FieldUniqueKey).Type == 0 && doc.Lookup(queue.FieldUniqueKeyFreed).StringValue() == key
		}
	}
	waitFor(t, db, run, 1)
	if !freed(run, "run")() {
		t.Errorf("the task the node ran still holds its key: %v", dentest.Task(t, db, run))
	}
	waitFor(t, db, cancelled, -5)
	dentest.Eventually(t, time.Minute, "the cancelled task's key freed", freed(cancelled, "cancelled"))
	dentest.Eventually(t, time.Minute, "the key of the task a Perl node finished freed", freed(perl, "perl"))
	if freed(blocked, "blocked")() {
		t.Error("a blocked task's key was freed")
	}
	// The node made the index: a second task with the blocked task's key
	// is refused, one with a freed key goes in.
	doc := func(key string) bson.D {
		return bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -4}, {Key: "node", Value: -1}, {Key: "unique_key", Value: key}}
	}
	if _, err := db.Collection("tasks").InsertOne(ctx, doc("blocked")); !queue.IsDuplicateKey(err) {
		t.Errorf("insert of a held key: %v, want a duplicate-key error", err)
	}
	if _, err := db.Collection("tasks").InsertOne(ctx, doc("perl")); err != nil {
		t.Errorf("insert of a freed key: %v", err)
	}
}
