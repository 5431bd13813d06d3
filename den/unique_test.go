package den_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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
	dentest.WaitStatus(t, db, run, 1)
	if !freed(run, "run")() {
		t.Errorf("the task the node ran still holds its key: %v", dentest.Task(t, db, run))
	}
	dentest.WaitStatus(t, db, cancelled, -5)
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

// A node that starts on a database where a writer inserted a task with an
// 8 KiB unique_key before den's indexes existed (issue 41, finding 7: the
// index that holds keys could not be made, and every den task add
// --unique-key failed) fails that task with the reason in its stderr
// before it makes the index, and makes every index; a unique task added
// then goes in.
func TestNodeTakesOversizedUniqueKeysOut(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	key := make([]byte, 4<<10)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	long := dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}}, bson.E{Key: queue.FieldUniqueKey, Value: hex.EncodeToString(key)})
	startNode(t, db, "n")
	doc := dentest.WaitStatus(t, db, long, queue.StatusFailed)
	if stderr, _ := doc.Lookup("stderr").StringValueOK(); !strings.Contains(stderr, "unique_key is 8192 bytes, at most 512") {
		t.Errorf("stderr %q; want the reason", stderr)
	}
	// The node makes the indexes after the task is failed, then works.
	dentest.Eventually(t, time.Minute, "every index of tasks made", func() bool { return len(missingTaskIndexes(t, db)) == 0 })
	params, err := bson.Marshal(bson.D{{Key: "ms", Value: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.NewStore(db).InsertTasks(dentest.Context(t), qid, []bson.Raw{params}, time.Now(),
		queue.InsertOptions{UniqueKey: "k"}); err != nil {
		t.Errorf("den task add --unique-key k: %v", err)
	}
}

// missingTaskIndexes are the indexes of tasks that queue.Indexes has (but
// the partial one a server may go without) and the database does not.
func missingTaskIndexes(t *testing.T, db *mongo.Database) []string {
	t.Helper()
	cur, err := db.Collection("tasks").Indexes().List(dentest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for cur.Next(dentest.Context(t)) {
		names[cur.Current.Lookup("name").StringValue()] = true
	}
	var missing []string
	for _, ix := range queue.Indexes {
		if ix.Collection == queue.TasksCollection && (len(ix.Partial) == 0 || ix.Unique) && !names[ix.Name()] {
			missing = append(missing, ix.Name())
		}
	}
	return missing
}
