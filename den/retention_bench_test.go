package den_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// BenchmarkRetention measures a node (production intervals) on the
// embedded server whose Demo queue holds 10,000 tasks that finished two
// hours ago, with the queue keeping everything and with a retention that
// keeps an hour: how long the retention takes to remove them and the
// commands per second meanwhile; then tasks per second and commands per
// task for new Demo tasks (DEN_BENCH_TASKS, default 50); then commands
// per idle second over 60 s, the retention's own look included.
// Counted at the wire, as BenchmarkCost counts.
func BenchmarkRetention(b *testing.B) {
	for _, keep := range []string{"everything", "1h"} {
		b.Run("keep="+keep, func(b *testing.B) {
			for range b.N {
				benchRetention(b, keep)
			}
		})
	}
}

// oldTasks is how many finished tasks BenchmarkRetention starts with.
const oldTasks = 10_000

func benchRetention(b *testing.B, keep string) {
	tasks := benchTasks(50)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel) // after the database is dropped (benchDB)
	srv, db := benchDB(ctx, b)
	var extra []bson.E
	if keep != "everything" {
		extra = append(extra, bson.E{Key: "retention", Value: bson.D{{Key: "succeeded", Value: keep}}})
	}
	qid := dentest.Queue(b, db, "demo", demo.Name, 4, "fifo", extra...)
	// Finished two hours ago, as a den node leaves a Demo task.
	ended := time.Now().Add(-2 * time.Hour)
	docs := make([]any, oldTasks)
	for i := range docs {
		id := bson.NewObjectID()
		binary.BigEndian.PutUint32(id[:4], uint32(ended.Add(-time.Minute).Unix()))
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusSucceeded}, {Key: "node", Value: "old"},
			{Key: "parameters", Value: bson.D{{Key: "commands", Value: "a"}}}, {Key: "ctime", Value: ended.Add(-time.Minute)}, {Key: "mtime", Value: ended},
			{Key: "stdout", Value: "This is command 'a' for apple.\n"}, {Key: "stderr", Value: ""}, {Key: "outcome", Value: "succeeded"},
			{Key: "runner", Value: bson.D{{Key: "token", Value: "t"}, {Key: "pid", Value: 1234}, {Key: "at", Value: ended.Add(-time.Second)}}},
			{Key: "usage", Value: bson.D{{Key: "cpu_seconds", Value: 0.01}, {Key: "peak_memory_mb", Value: 12.5}, {Key: "wall_seconds", Value: 0.2}}}}
	}
	if _, err := db.Collection("tasks").InsertMany(context.Background(), docs); err != nil {
		b.Fatal(err)
	}
	dentest.Update(b, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_total", Value: oldTasks}}}})
	old := func() int64 {
		n, _ := db.Collection("tasks").CountDocuments(context.Background(), bson.D{{Key: "node", Value: "old"}})
		return n
	}

	before := srv.stats()
	start := time.Now()
	benchNode(b, srv.uri, srv.database, "bench")
	var purge time.Duration
	if keep != "everything" {
		dentest.UntilBy(time.Now().Add(30*time.Minute), time.Second, func() bool { return old() == 0 })
		if n := old(); n > 0 {
			b.Fatalf("%d old tasks left after 30 minutes", n)
		}
		purge = time.Since(start)
		purged := srv.stats().Sub(before)
		b.ReportMetric(purge.Seconds(), "purge-s")
		b.ReportMetric(float64(purged.Total())/purge.Seconds(), "purge-cmds/s")
		b.Logf("commands while removing %d tasks in %s: %s", oldTasks, purge.Round(time.Second), top(purged))
	} else {
		waitStartUp(b, db, "bench")
	}

	before = srv.stats()
	start = time.Now()
	insertTasks(b, db, qid, tasks)
	done := int64(0)
	finished := bson.D{{Key: "status", Value: 1}, {Key: "node", Value: bson.D{{Key: "$ne", Value: "old"}}}}
	dentest.UntilBy(time.Now().Add(20*time.Minute), time.Second, func() bool {
		done, _ = db.Collection("tasks").CountDocuments(context.Background(), finished)
		return done >= int64(tasks)
	})
	if done == 0 {
		b.Fatal("no task finished in 20 minutes")
	}
	work := srv.stats().Sub(before)
	took := time.Since(start)
	var last struct {
		Mtime time.Time `bson:"mtime"`
	}
	if err := db.Collection("tasks").FindOne(context.Background(), finished,
		options.FindOne().SetSort(bson.D{{Key: "mtime", Value: -1}})).Decode(&last); err == nil && last.Mtime.After(start) {
		took = last.Mtime.Sub(start)
	}
	b.ReportMetric(float64(done)/took.Seconds(), "tasks/s")
	b.ReportMetric(float64(work.Total())/float64(done), "cmds/task")
	b.Logf("commands for %d tasks: %s", done, top(work))

	// Two retention periods (1m), so that its look counts at its share.
	const idleWindow = 120 * time.Second
	before = srv.stats()
	time.Sleep(idleWindow) // a window of idle commands, measured: nothing to wait for
	idle := srv.stats().Sub(before)
	b.ReportMetric(float64(idle.Total())/idleWindow.Seconds(), "idle-cmds/s")
	b.Logf("idle commands over %s: %s", idleWindow, top(idle))
}
