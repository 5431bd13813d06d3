package queue_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// insertKeyed inserts one task with a unique key, as den task add does.
func insertKeyed(t *testing.T, s queue.OperatorStore, qid bson.ObjectID, key string) (bson.ObjectID, error) {
	t.Helper()
	ids, err := s.InsertTasks(dentest.Context(t), qid, []bson.Raw{bson.Raw(bsonDoc(t, bson.D{{Key: "commands", Value: "a"}}))}, time.Now(), queue.InsertOptions{UniqueKey: key})
	if err != nil {
		return bson.ObjectID{}, err
	}
	if len(ids) != 1 {
		t.Fatalf("inserted %d tasks, want 1", len(ids))
	}
	return ids[0], nil
}

func bsonDoc(t *testing.T, d bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// held fails the test unless err is the refusal of key, naming holder.
func held(t *testing.T, err error, key string, holder bson.ObjectID, status int) {
	t.Helper()
	var h *queue.KeyHeldError
	if !errors.As(err, &h) {
		t.Fatalf("error %v, want the key held", err)
	}
	if h.Key != key || h.Holder != holder || h.Status != status || !strings.Contains(h.Error(), holder.Hex()) {
		t.Fatalf("refusal %+v (%q), want key %q held by %s with status %d", h, h.Error(), key, holder.Hex(), status)
	}
}

// A key is held by one unfinished task of a queue at a time, whatever
// inserts the second (den or a user's own insert); other queues and tasks
// without a key are not held by it; once the task has ended (a den run's
// result, or a write by someone else that the next insert or the sweep
// frees) the key is free again; a retry takes it back, or is refused while
// another task holds it.
func TestUniqueKeyHeldUntilTheTaskEnds(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	other := dentest.Queue(t, db, "other", "Any", 1, "fifo")

	first, err := insertKeyed(t, store, qid, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = insertKeyed(t, store, qid, "k")
	held(t, err, "k", first, queue.StatusQueued)
	if _, err := insertKeyed(t, store, other, "k"); err != nil {
		t.Fatalf("the same key in another queue: %v", err)
	}
	// A user's own insert (mongosh) meets the index too.
	_, err = db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "unique_key", Value: "k"}})
	if !queue.IsDuplicateKey(err) {
		t.Fatalf("a user's insert of a held key: %v, want a duplicate-key error", err)
	}
	// Tasks without a key are not held by the index.
	dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{})
	if todo := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}}); todo != 4 {
		t.Fatalf("%d tasks in q, want 4", todo)
	}
	if q, err := db.Collection("queues").FindOne(ctx, bson.D{{Key: "_id", Value: qid}}).Raw(); err != nil || q.Lookup("count_todo").AsInt64() != 4 {
		t.Fatalf("queue %v, %v after a refused insert: want count_todo 4 (the keyed task and three others)", q, err)
	}

	// A den run ends it: its result frees the key, no command more.
	dentest.Claim(t, db, first, "n")
	run := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Host: "h"}
	if _, ok, err := store.Start(ctx, first, "n", run, time.Now()); err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}
	_, err = insertKeyed(t, store, qid, "k")
	held(t, err, "k", first, queue.StatusRunning)
	if ok, err := store.Finish(ctx, first, "n", run.Token, queue.Result{Status: 1}, time.Now()); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if doc := dentest.Task(t, db, first); doc.Lookup("unique_key").Type != 0 || doc.Lookup("unique_key_freed").StringValue() != "k" {
		t.Fatalf("finished task %v: want unique_key renamed unique_key_freed", doc)
	}
	_, err = db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "unique_key", Value: "k"}})
	if err != nil {
		t.Fatalf("a user's insert once the holder ended: %v", err)
	}
	var second bson.ObjectID
	if raw, err := db.Collection("tasks").FindOne(ctx, bson.D{{Key: "unique_key", Value: "k"}, {Key: "queue", Value: qid}}).Raw(); err != nil {
		t.Fatal(err)
	} else {
		second = raw.Lookup("_id").ObjectID()
	}

	// Someone else ends it (a Perl node, status 2): den's next insert of
	// the key frees it first.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: second}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "perl"}}}})
	third, err := insertKeyed(t, store, qid, "k")
	if err != nil {
		t.Fatalf("the key once its task failed: %v", err)
	}

	// An operator's retry of a task whose key another holds is refused,
	// and takes the key back once that one has ended.
	firstTask, err := store.Task(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := store.RetryEnded(ctx, *firstTask, time.Now())
	if ok {
		t.Fatal("a retry took a key another task holds")
	}
	held(t, err, "k", third, queue.StatusQueued)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: third}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -5}}}})
	if n, err := queue.NewStore(db).FreeEnded(ctx, bson.ObjectID{}, "", time.Now()); err != nil || n != 1 {
		t.Fatalf("sweep freed %d, %v; want the cancelled task's key", n, err)
	}
	firstTask, _ = store.Task(ctx, first)
	if ok, err := store.RetryEnded(ctx, *firstTask, time.Now()); err != nil || !ok {
		t.Fatalf("retry once the key is free: %v %v", ok, err)
	}
	if doc := dentest.Task(t, db, first); doc.Lookup("unique_key").StringValue() != "k" {
		t.Fatalf("retried task %v: want its unique_key back", doc)
	}
	_, err = insertKeyed(t, store, qid, "k")
	held(t, err, "k", first, queue.StatusQueued)
}

// Which statuses hold a key: every one but the ended (queue.Ended). A
// blocked (-4), terminated (-3) or held (-7) task will run again, so it
// keeps its key; finished (1 and up), cancelled (-5) and orphaned (-6)
// tasks free theirs in the sweep.
func TestUniqueKeyFreedOnlyByEndedStatuses(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	statuses := []int{-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3}
	for _, st := range statuses {
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: st}, {Key: "node", Value: "n"}, {Key: "unique_key", Value: "k" + string(rune('a'+st+7))}})
	}
	if n, err := queue.NewStore(db).FreeEnded(ctx, bson.ObjectID{}, "", time.Now()); err != nil {
		t.Fatal(err)
	} else if n != 5 {
		t.Errorf("freed %d keys, want 5", n)
	}
	for _, st := range statuses {
		raw, err := db.Collection("tasks").FindOne(ctx, bson.D{{Key: "status", Value: st}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if holds := raw.Lookup("unique_key").Type != 0; holds == queue.Ended(st) {
			t.Errorf("status %d: holds its key %v, want %v", st, holds, !queue.Ended(st))
		}
	}
}

// Adds that race for one key insert one task: the index decides, not a
// read before the write.
func TestUniqueKeyConcurrentInserts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	var wg sync.WaitGroup
	var mu sync.Mutex
	inserted, refused := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := queue.NewStore(db)
			_, err := insertKeyed(t, s, qid, "race")
			mu.Lock()
			defer mu.Unlock()
			var h *queue.KeyHeldError
			switch {
			case err == nil:
				inserted++
			case errors.As(err, &h):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if inserted != 1 || refused != 7 {
		t.Fatalf("%d inserted, %d refused; want 1 and 7", inserted, refused)
	}
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "unique_key", Value: "race"}}); n != 1 {
		t.Fatalf("%d tasks hold the key, want 1", n)
	}
}

// On a database whose tasks share keys from before den held them: ended
// ones are freed and the index is made; unfinished ones keep the index
// from being made, which a node's start reports as a conflict and goes on.
func TestUniqueKeyIndexOverTasksInsertedBefore(t *testing.T) {
	t.Parallel()
	ctx := dentest.Context(t)
	task := func(qid bson.ObjectID, status int, key string) bson.D {
		return bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: status}, {Key: "node", Value: "n"}, {Key: "unique_key", Value: key}}
	}

	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	dentest.Insert(t, db.Collection("tasks"), task(qid, 1, "old"), task(qid, 2, "old"), task(qid, -2, "old"))
	if err := queue.NewStore(db).EnsureUniqueKeys(ctx); err != nil {
		t.Fatalf("index over ended tasks sharing a key: %v", err)
	}
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "unique_key", Value: "old"}}); n != 1 {
		t.Fatalf("%d tasks hold the key, want the unfinished one", n)
	}

	db = dentest.DB(t)
	qid = dentest.Queue(t, db, "q", "Any", 1, "fifo")
	dentest.Insert(t, db.Collection("tasks"), task(qid, -2, "twice"), task(qid, 0, "twice"))
	r, err := queue.NewStore(db).EnsureIndexes(ctx)
	if err != nil || len(r.Conflicts) != 1 || !strings.Contains(r.Conflicts[0], queue.UniqueKeyIndex.Name()) {
		t.Fatalf("EnsureIndexes = %+v, %v; want the unique key index reported as a conflict", r, err)
	}
}

// randomKey is a key of n bytes that does not compress (an index row on
// PostgreSQL, the development server's engine, is compressed first).
func randomKey(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

// indexNames are the names of the indexes of every collection Indexes
// makes indexes on.
func indexNames(t *testing.T, db *mongo.Database) map[string]bool {
	t.Helper()
	ctx := dentest.Context(t)
	names := map[string]bool{}
	for _, ix := range queue.Indexes {
		cur, err := db.Collection(ix.Collection).Indexes().List(ctx)
		if err != nil {
			t.Fatalf("list the indexes of %s: %v", ix.Collection, err)
		}
		for cur.Next(ctx) {
			names[ix.Collection+"."+cur.Current.Lookup("name").StringValue()] = true
		}
		cur.Close(ctx)
	}
	return names
}

// cleanIndexes are the indexes EnsureIndexes makes in an empty database
// of this server.
func cleanIndexes(t *testing.T) map[string]bool {
	t.Helper()
	db := dentest.DB(t)
	if _, err := queue.NewStore(db).EnsureIndexes(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	return indexNames(t, db)
}

// A unique_key longer than queue.MaxUniqueKey (or a key that is no string
// and as long), in tasks a writer inserted before den's indexes existed,
// is taken out of the index's way before the index is made (issue 41,
// finding 7: an 8 KiB key made the index fail, and with it every den task
// add --unique-key of the database): an unfinished task not yet claimed
// fails with the reason in its stderr (and its queue's count_todo goes
// down), one that ended, or is claimed or running, has its key moved to
// unique_key_freed. Keys within the bound are left alone, and every index
// is made.
func TestOversizedUniqueKeysTakenOutBeforeTheIndex(t *testing.T) {
	t.Parallel()
	want := cleanIndexes(t)
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	long := randomKey(t, 8<<10)
	task := func(status int, node any, key any) bson.ObjectID {
		id := bson.NewObjectID()
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: status},
			{Key: "node", Value: node}, {Key: "parameters", Value: bson.D{}}, {Key: "unique_key", Value: key}})
		if status <= 0 {
			dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}}}})
		}
		return id
	}
	queued := task(queue.StatusQueued, -1, long)
	blocked := task(queue.StatusBlocked, -1, randomKey(t, queue.MaxUniqueKey+1))
	document := task(queue.StatusQueued, -1, bson.D{{Key: "k", Value: long}})
	ended := task(queue.StatusSucceeded, "n1", long)
	running := task(queue.StatusRunning, "n1", long)
	atBound := task(queue.StatusQueued, -1, randomKey(t, queue.MaxUniqueKey))
	number := task(queue.StatusQueued, -1, 7)

	if _, err := store.EnsureIndexes(ctx); err != nil {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	if got := indexNames(t, db); !maps.Equal(got, want) {
		t.Errorf("indexes %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for _, id := range []bson.ObjectID{queued, blocked, document} {
		doc := dentest.Task(t, db, id)
		stderr, _ := doc.Lookup("stderr").StringValueOK()
		if doc.Lookup("status").AsInt64() != queue.StatusFailed || !strings.Contains(stderr, "unique_key") || !strings.Contains(stderr, strconv.Itoa(queue.MaxUniqueKey)) {
			t.Errorf("task %s with an oversized key: status %v, stderr %q; want failed (2) with the reason", id.Hex(), doc.Lookup("status"), stderr)
		}
		if doc.Lookup(queue.FieldUniqueKey).Type != 0 {
			t.Errorf("failed task %s still holds its key", id.Hex())
		}
	}
	for _, c := range []struct {
		id     bson.ObjectID
		status int64
	}{{ended, queue.StatusSucceeded}, {running, queue.StatusRunning}} {
		doc := dentest.Task(t, db, c.id)
		if doc.Lookup("status").AsInt64() != c.status || doc.Lookup(queue.FieldUniqueKey).Type != 0 || doc.Lookup(queue.FieldUniqueKeyFreed).StringValue() != long {
			t.Errorf("task %s (status %d) with an oversized key: %v; want its status kept and its key in %s", c.id.Hex(), c.status, doc.Lookup("status"), queue.FieldUniqueKeyFreed)
		}
	}
	for _, id := range []bson.ObjectID{atBound, number} {
		if doc := dentest.Task(t, db, id); doc.Lookup("status").AsInt64() != queue.StatusQueued || doc.Lookup(queue.FieldUniqueKey).Type == 0 {
			t.Errorf("task %s with a key within the bound was changed: %v", id.Hex(), doc)
		}
	}
	if todo := queueDocCount(t, db, qid); todo != 3 { // atBound, number, running
		t.Errorf("count_todo %d after 3 of 6 unfinished tasks failed, want 3", todo)
	}
	if _, err := insertKeyed(t, store, qid, "after"); err != nil {
		t.Errorf("a task with a key after: %v", err)
	}
}

// den task add --unique-key on a database without the index (a node never
// started there) makes it, after the same repair: the task goes in, and
// the task a writer inserted with an 8 KiB key is failed with the reason.
func TestUniqueKeyAddTakesOversizedKeysOut(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	long := dentest.TaskWith(t, db, qid, bson.D{}, bson.E{Key: queue.FieldUniqueKey, Value: randomKey(t, 8<<10)})
	if _, err := insertKeyed(t, store, qid, "k"); err != nil {
		t.Fatalf("den task add --unique-key k: %v", err)
	}
	doc := dentest.Task(t, db, long)
	if stderr, _ := doc.Lookup("stderr").StringValueOK(); doc.Lookup("status").AsInt64() != queue.StatusFailed || !strings.Contains(stderr, "unique_key") {
		t.Errorf("the task with an 8 KiB key: %v, stderr %q; want failed with the reason", doc.Lookup("status"), stderr)
	}
}

// Indexes are made one by one: one the server refuses (here a task whose
// node is 8 KiB, which an index row on PostgreSQL cannot hold) leaves
// every other index made, and the refusal is reported with what goes
// without it. Where the server takes such a key (MongoDB, SQLite), all
// are made.
func TestIndexesMadeOneByOne(t *testing.T) {
	t.Parallel()
	want := cleanIndexes(t)
	db := dentest.DB(t)
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: bson.NewObjectID()}, {Key: "status", Value: queue.StatusSucceeded},
		{Key: "node", Value: randomKey(t, 8<<10)}})
	r, err := queue.NewStore(db).EnsureIndexes(dentest.Context(t))
	if err != nil {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	failed := map[string]bool{}
	for _, f := range r.Failed {
		failed[f.Index] = true
		if !strings.HasPrefix(f.Index, "tasks.node_") || f.Without == "" || f.Err == nil {
			t.Errorf("failure %+v; want only the indexes over node, each with what goes without it", f)
		}
	}
	got := indexNames(t, db)
	for name := range want {
		if !got[name] && !failed[name] {
			t.Errorf("index %s missing, and not reported as failed", name)
		}
		if !got[name] && !strings.HasPrefix(name, "tasks.node_") {
			t.Errorf("index %s missing, though only the node indexes could fail", name)
		}
	}
	if len(r.Failed) == 0 {
		t.Logf("this server took an 8 KiB key in an index: nothing failed, every index made")
	} else {
		t.Logf("refused, and reported: %v; every other index made", slices.Sorted(maps.Keys(failed)))
	}
}

func queueDocCount(t *testing.T, db *mongo.Database, qid bson.ObjectID) int64 {
	t.Helper()
	raw, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: qid}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := raw.Lookup("count_todo").AsInt64OK()
	return n
}
