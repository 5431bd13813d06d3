package dentest

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Queue inserts a queue document the way the protocol writes one and
// returns its _id. extra fields are appended (or override nothing: use
// distinct keys).
func Queue(t testing.TB, db *mongo.Database, name, plugin string, maxthreads int, sort string, extra ...bson.E) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "name", Value: name}, {Key: "constructor", Value: plugin},
		{Key: "maxthreads", Value: maxthreads}, {Key: "sort", Value: sort},
		{Key: "count_todo", Value: 0}, {Key: "count_total", Value: 0},
	}
	doc = append(doc, extra...)
	if _, err := db.Collection("queues").InsertOne(Context(t), doc); err != nil {
		t.Fatalf("insert queue %s: %v", name, err)
	}
	return id
}

// Tasks inserts one queued task per parameters document, as a user would
// from the mongo shell, increments the queue's counts, and returns the ids
// in insertion order.
func Tasks(t testing.TB, db *mongo.Database, queueID bson.ObjectID, params ...bson.D) []bson.ObjectID {
	t.Helper()
	return insertTasks(t, db, queueID, nil, params)
}

// TaskWith inserts one queued task as Tasks does, with the extra fields
// (end_before, timeout, max_retries, ...) in the document as inserted: a
// node that is already running never sees the task without them, as it
// may when they are set by an update after the insert.
func TaskWith(t testing.TB, db *mongo.Database, queueID bson.ObjectID, params bson.D, extra ...bson.E) bson.ObjectID {
	t.Helper()
	return insertTasks(t, db, queueID, extra, []bson.D{params})[0]
}

func insertTasks(t testing.TB, db *mongo.Database, queueID bson.ObjectID, extra bson.D, params []bson.D) []bson.ObjectID {
	t.Helper()
	ids := make([]bson.ObjectID, len(params))
	docs := make([]any, len(params))
	now := time.Now()
	for i, p := range params {
		ids[i] = bson.NewObjectID()
		docs[i] = bson.D{
			{Key: "_id", Value: ids[i]}, {Key: "queue", Value: queueID}, {Key: "status", Value: -2},
			{Key: "node", Value: -1}, {Key: "parameters", Value: p}, {Key: "ctime", Value: now},
			{Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
		}
		docs[i] = append(docs[i].(bson.D), extra...)
	}
	ctx := Context(t)
	if len(docs) > 0 {
		if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
			t.Fatalf("insert tasks: %v", err)
		}
	}
	_, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: queueID}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: len(params)}, {Key: "count_total", Value: len(params)}}}})
	if err != nil {
		t.Fatalf("count tasks: %v", err)
	}
	return ids
}

// Claim marks a task claimed (status -1) by node, as a node's claim does,
// setting extra fields too: for tests that run a task runner directly.
func Claim(t testing.TB, db *mongo.Database, id bson.ObjectID, node string, extra ...bson.E) {
	t.Helper()
	set := append(bson.D{{Key: "node", Value: node}, {Key: "status", Value: -1}}, extra...)
	if _, err := db.Collection("tasks").UpdateOne(Context(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}}); err != nil {
		t.Fatalf("claim task %s: %v", id.Hex(), err)
	}
}

// CountTasks counts the tasks matching filter.
func CountTasks(t testing.TB, db *mongo.Database, filter bson.D) int64 {
	t.Helper()
	n, err := db.Collection("tasks").CountDocuments(Context(t), filter)
	if err != nil {
		t.Fatalf("count tasks: %v", err)
	}
	return n
}

// Task reads one task document.
func Task(t testing.TB, db *mongo.Database, id bson.ObjectID) bson.Raw {
	t.Helper()
	raw, err := db.Collection("tasks").FindOne(Context(t), bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		t.Fatalf("read task %s: %v", id.Hex(), err)
	}
	return raw
}
