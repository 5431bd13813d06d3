package dentest

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Insert inserts docs into coll and fails the test if that fails: a test
// whose setup silently did not happen may pass without checking anything.
func Insert(t testing.TB, coll *mongo.Collection, docs ...any) {
	t.Helper()
	if len(docs) == 0 {
		t.Fatalf("dentest: insert into %s: no documents", coll.Name())
	}
	if _, err := coll.InsertMany(Context(t), docs); err != nil {
		t.Fatalf("insert into %s: %v", coll.Name(), err)
	}
}

// Update applies update to the one document of coll that filter matches,
// and fails the test if that fails or matches nothing.
func Update(t testing.TB, coll *mongo.Collection, filter, update any) {
	t.Helper()
	res, err := coll.UpdateOne(Context(t), filter, update)
	if err != nil {
		t.Fatalf("update %s: %v", coll.Name(), err)
	}
	if res.MatchedCount != 1 {
		t.Fatalf("update %s: %d documents matched %v, want 1", coll.Name(), res.MatchedCount, filter)
	}
}

// Delete deletes the one document of coll that filter matches, and fails
// the test if that fails or matches nothing.
func Delete(t testing.TB, coll *mongo.Collection, filter any) {
	t.Helper()
	res, err := coll.DeleteOne(Context(t), filter)
	if err != nil {
		t.Fatalf("delete from %s: %v", coll.Name(), err)
	}
	if res.DeletedCount != 1 {
		t.Fatalf("delete from %s: %d documents matched %v, want 1", coll.Name(), res.DeletedCount, filter)
	}
}

// Count counts the documents of coll that filter matches, and fails the
// test if it cannot: a count of 0 read from an error proves nothing.
func Count(t testing.TB, coll *mongo.Collection, filter any) int64 {
	t.Helper()
	n, err := coll.CountDocuments(Context(t), filter)
	if err != nil {
		t.Fatalf("count %s: %v", coll.Name(), err)
	}
	return n
}
