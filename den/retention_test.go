package den_test

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// endedTask inserts a task of queue qid that ended (status) at ended and
// was created a minute before, as a node leaves one, with extra fields,
// and counts it in the queue.
func endedTask(t *testing.T, db *mongo.Database, qid bson.ObjectID, status int, ended time.Time, extra ...bson.E) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	binary.BigEndian.PutUint32(id[:4], uint32(ended.Add(-time.Minute).Unix()))
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: status}, {Key: "node", Value: "elsewhere"},
		{Key: "parameters", Value: bson.D{{Key: "commands", Value: "a"}}}, {Key: "ctime", Value: ended.Add(-time.Minute)},
		{Key: "mtime", Value: ended}, {Key: "stdout", Value: "out\n"}, {Key: "stderr", Value: ""},
	}
	for _, e := range extra {
		replaced := false
		for i := range doc {
			if doc[i].Key == e.Key {
				doc[i], replaced = e, true
			}
		}
		if !replaced {
			doc = append(doc, e)
		}
	}
	dentest.Insert(t, db.Collection("tasks"), doc)
	inc := bson.D{{Key: "count_total", Value: 1}}
	if status <= 0 {
		inc = append(inc, bson.E{Key: "count_todo", Value: 1})
	}
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: inc}})
	return id
}

// withRetention makes a node look for tasks past their retention every
// pass's worth of test time, with default as its node-wide default.
func withRetention(def queue.Retention) func(*den.Config) {
	return func(c *den.Config) {
		c.RetentionEvery = 200 * time.Millisecond
		c.Retention = def
	}
}

func queueCounts(t *testing.T, db *mongo.Database, qid bson.ObjectID) (todo, total int64) {
	t.Helper()
	var q struct {
		Todo  int64 `bson:"count_todo"`
		Total int64 `bson:"count_total"`
	}
	if err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: qid}}).Decode(&q); err != nil {
		t.Fatal(err)
	}
	return q.Todo, q.Total
}

// A running node removes ended tasks past their retention, by class and
// age: the queue's own retention where it says, the node's default where
// it does not, "keep" overriding the default. Deleted tasks take their
// GridFS files (every chunk) and, when the queue says so, their reports;
// archived ones move to tasks_archive with their files kept. Tasks too
// young, not ended, or that a waiting task comes after stay; the counts
// follow. A task is removed once the dependent that protected it ended.
func TestRetentionRemovesEndedTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	now := time.Now()
	hours := func(h float64) time.Time { return now.Add(-time.Duration(h * float64(time.Hour))) }
	del := dentest.Queue(t, db, "del", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: bson.D{
		{Key: "succeeded", Value: "1h"}, {Key: "failed", Value: "1d"}, {Key: "orphaned", Value: "keep"}, {Key: "reports", Value: "delete"}}})
	arch := dentest.Queue(t, db, "arch", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: bson.D{
		{Key: "succeeded", Value: 3600}, {Key: "action", Value: "archive"}}})
	plain := dentest.Queue(t, db, "plain", demo.Name, 1, "fifo") // the node's default alone: it keeps succeeded tasks

	bucket := gridfs.NewBucket(db, "tasks")
	put := func(task bson.ObjectID, size int) bson.ObjectID {
		id, err := bucket.Put(dentest.Context(t), "stdout", bson.D{{Key: "task_id", Value: task}}, []byte(strings.Repeat("x", size)))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	type want struct {
		id   bson.ObjectID
		gone bool
		what string
	}
	var wants []want
	add := func(id bson.ObjectID, gone bool, what string) bson.ObjectID {
		wants = append(wants, want{id, gone, what})
		return id
	}
	oldOK := add(endedTask(t, db, del, 1, hours(2)), true, "del: succeeded 2h ago (1h)")
	// Its output in GridFS, from two runs: 600 KiB is three chunks.
	out := put(oldOK, 600<<10)
	earlier := put(oldOK, 10)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: oldOK}}, bson.D{{Key: "$set", Value: bson.D{{Key: "stdout", Value: out},
		{Key: "history", Value: bson.A{bson.D{{Key: "attempt", Value: 1}, {Key: "stdout", Value: earlier}}}}}}})
	dentest.Insert(t, db.Collection("reports"), bson.D{{Key: "task_id", Value: oldOK}})
	add(endedTask(t, db, del, 1, hours(0.5)), false, "del: succeeded 30m ago (1h)")
	add(endedTask(t, db, del, 2, hours(25)), true, "del: failed 25h ago (1d)")
	add(endedTask(t, db, del, 2, hours(2)), false, "del: failed 2h ago (1d)")
	add(endedTask(t, db, del, -5, hours(3)), true, "del: cancelled 3h ago (the node's default 2h)")
	add(endedTask(t, db, del, -6, hours(300)), false, "del: orphaned long ago (keep, over the node's default)")
	add(endedTask(t, db, del, -2, hours(5), bson.E{Key: "node", Value: -1}, bson.E{Key: "queue", Value: bson.NewObjectID()}), false,
		"a queued task of another queue")
	blocker := add(endedTask(t, db, del, -4, hours(5)), false, "del: held (-4) long ago")
	needed := add(endedTask(t, db, del, 1, hours(3), bson.E{Key: "has_dependents", Value: true}), false, "del: succeeded, a waiting task comes after it")
	// held waits for needed, which succeeded, and for blocker, which is held.
	held := add(endedTask(t, db, del, -4, hours(3), bson.E{Key: "after", Value: bson.A{needed, blocker}}), false, "del: a task waiting for two")
	archived := add(endedTask(t, db, arch, 1, hours(2)), true, "arch: succeeded 2h ago (3600 s), archived")
	archFile := put(archived, 10)
	dentest.Insert(t, db.Collection("reports"), bson.D{{Key: "task_id", Value: archived}})
	add(endedTask(t, db, arch, 2, hours(100)), false, "arch: failed (no time: the node's default keeps)")
	add(endedTask(t, db, plain, 1, hours(1000)), false, "plain: succeeded long ago (the node's default keeps)")
	add(endedTask(t, db, plain, -5, hours(3)), true, "plain: cancelled 3h ago (the node's default 2h)")
	todoBefore, totalBefore := queueCounts(t, db, del)

	startNode(t, db, "n1", withRetention(queue.Retention{Keep: map[string]time.Duration{
		queue.RetainCancelled: 2 * time.Hour, queue.RetainOrphaned: time.Hour}}))
	exists := func(id bson.ObjectID) bool { return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: id}}) == 1 }
	dentest.Eventually(t, time.Minute, "the tasks past their retention are removed", func() bool {
		for _, w := range wants {
			if w.gone && exists(w.id) {
				return false
			}
		}
		return true
	})
	for _, w := range wants {
		if !w.gone && !exists(w.id) {
			t.Errorf("removed, want kept: %s", w.what)
		}
	}
	// Deleted: every file of the task, every chunk; archived: kept.
	files := dentest.Count(t, db.Collection("tasks.files"), bson.D{})
	chunks := dentest.Count(t, db.Collection("tasks.chunks"), bson.D{{Key: "files_id", Value: bson.D{{Key: "$ne", Value: archFile}}}})
	if files != 1 || chunks != 0 || dentest.Count(t, db.Collection("tasks.files"), bson.D{{Key: "_id", Value: archFile}}) != 1 {
		t.Errorf("GridFS holds %d files and %d chunks of deleted tasks; want only the archived task's file", files, chunks)
	}
	if n := dentest.Count(t, db.Collection("reports"), bson.D{{Key: "task_id", Value: oldOK}}); n != 0 {
		t.Errorf("the report of a task deleted with reports: delete is still there")
	}
	if n := dentest.Count(t, db.Collection("reports"), bson.D{{Key: "task_id", Value: archived}}); n != 1 {
		t.Errorf("the report of a task whose queue keeps reports is gone")
	}
	if n := dentest.Count(t, db.Collection(queue.ArchiveCollection), bson.D{{Key: "_id", Value: archived}, {Key: "status", Value: 1}}); n != 1 {
		t.Errorf("the archived task is not in %s", queue.ArchiveCollection)
	}
	// Counts: 3 tasks left del's total, one of them (cancelled) its todo.
	todo, total := queueCounts(t, db, del)
	if todo != todoBefore-1 || total != totalBefore-3 {
		t.Errorf("del's counts: todo %d, total %d; want %d, %d", todo, total, todoBefore-1, totalBefore-3)
	}

	// The dependent ends: the task it came after goes too.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: held}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}, {Key: "mtime", Value: time.Now()}}}})
	dentest.Eventually(t, time.Minute, "the task no task waits for any more is removed", func() bool { return !exists(needed) })
	if !exists(held) {
		t.Error("the dependent, which ended just now, was removed")
	}
}

// Two nodes with a retention: one at a time removes tasks (the lease),
// never both at once; when the one that holds the lease stops, it
// releases it and the other goes on at once.
func TestRetentionOneNodeAtATime(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: bson.D{{Key: "succeeded", Value: "1h"}}})
	var active, most atomic.Int32
	var mu sync.Mutex
	batches := map[string]int{}
	watch := func(name string) func(*den.Config) {
		return func(c *den.Config) {
			c.RetentionEvery = 100 * time.Millisecond
			c.OnRetentionBatch = func(start bool) {
				if !start {
					active.Add(-1)
					return
				}
				n := active.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				batches[name]++
				mu.Unlock()
				// A batch held open, a window for another holder to
				// show: the test widens the race it checks, it waits for
				// nothing.
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	insert := func(n int) {
		for range n {
			endedTask(t, db, qid, 1, time.Now().Add(-2*time.Hour))
		}
	}
	insert(300)
	nodes := map[string]func(){}
	for _, name := range []string{"a", "b"} {
		nodes[name] = startNode(t, db, name, watch(name)).Stop
	}
	dentest.Eventually(t, time.Minute, "the old tasks are removed", func() bool { return dentest.CountTasks(t, db, bson.D{}) == 0 })
	var lease struct{ Holder string }
	if err := db.Collection("leases").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: "retention"}}).Decode(&lease); err != nil {
		t.Fatal(err)
	}
	holder, other := lease.Holder, map[string]string{"a": "b", "b": "a"}[lease.Holder]
	if other == "" {
		t.Fatalf("the lease's holder is %q, neither node", holder)
	}
	mu.Lock()
	if batches[other] != 0 {
		t.Errorf("node %s removed tasks (%d batches) while %s held the lease", other, batches[other], holder)
	}
	mu.Unlock()
	nodes[holder]()
	insert(50)
	dentest.Eventually(t, time.Minute, "the other node removes the new old tasks", func() bool { return dentest.CountTasks(t, db, bson.D{}) == 0 })
	mu.Lock()
	if batches[other] == 0 {
		t.Errorf("node %s never removed a task after %s stopped", other, holder)
	}
	mu.Unlock()
	if m := most.Load(); m != 1 {
		t.Errorf("%d nodes removed tasks at once; want 1", m)
	}
}

// A queue whose retention cannot be read is still served, its tasks are
// kept, and the node says why once; other queues' retention goes on.
func TestRetentionMalformedIsKeptAndServed(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	bad := dentest.Queue(t, db, "bad", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: "7d"})
	typo := dentest.Queue(t, db, "typo", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: bson.D{{Key: "succeded", Value: "1h"}}})
	good := dentest.Queue(t, db, "good", demo.Name, 1, "fifo", bson.E{Key: "retention", Value: bson.D{{Key: "succeeded", Value: "1h"}}})
	keptBad := endedTask(t, db, bad, 1, time.Now().Add(-100*time.Hour))
	keptTypo := endedTask(t, db, typo, 1, time.Now().Add(-100*time.Hour))
	gone := endedTask(t, db, good, 1, time.Now().Add(-100*time.Hour))
	run := dentest.Tasks(t, db, bad, bson.D{{Key: "commands", Value: "a"}})
	n := startNode(t, db, "n1", withRetention(queue.Retention{Keep: map[string]time.Duration{queue.RetainSucceeded: time.Hour}}))
	dentest.Eventually(t, time.Minute, "the queue with a bad retention runs its task, and good's old task is removed", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: run[0]}, {Key: "status", Value: 1}}) == 1 &&
			dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: gone}}) == 0
	})
	if dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{keptBad, keptTypo}}}}}) != 2 {
		t.Error("a task of a queue whose retention cannot be read was removed (by the node's default?)")
	}
	warned := map[string]int{}
	for _, e := range n.Logs.FilterMessageSnippet("retention cannot be read").All() {
		warned[e.ContextMap()["queue"].(string)]++
		if p, _ := e.ContextMap()["problem"].(string); !strings.Contains(p, "retention") {
			t.Errorf("the warning does not say what is wrong: %q", p)
		}
	}
	if warned["bad"] != 1 || warned["typo"] != 1 {
		t.Errorf("warnings by queue: %v; want one for bad and one for typo", warned)
	}
}
