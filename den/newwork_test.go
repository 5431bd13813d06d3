package den_test

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// newWorkPasses is how many of its full passes a node may make after a
// task is inserted before it has claimed the task: the pass under way
// may have read the queues before the insert, the next one reads the new
// queue and finds its task (the probe, after the claims), and one more is
// slack for a probe that its share of the database's time put off. At the
// default interval of a second, that is the 3 s.
const newWorkPasses = 3

// driverTask inserts a queued task into queue q exactly as the README's
// mongosh example does, without raising the queue's counts, and returns
// its _id.
func driverTask(t *testing.T, db *mongo.Database, q bson.ObjectID, i int) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	now := time.Now()
	if _, err := db.Collection("tasks").InsertOne(dentest.Context(t), bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: q}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
		{Key: "parameters", Value: bson.D{{Key: "ms", Value: 1}, {Key: "i", Value: i}}},
		{Key: "ctime", Value: now}, {Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// passesUntilClaimed waits until node has claimed every task of ids (any
// status but queued), and returns how many of its full passes it saw
// begin meanwhile (by its node document's timestamp, which each full pass
// writes), and how long it took. Polled every 20 ms, so that at a pass a
// second none goes unseen; on a machine so loaded that the poll misses
// one, fewer are counted, never more.
func passesUntilClaimed(t *testing.T, db *mongo.Database, node string, ids ...bson.ObjectID) (int, time.Duration) {
	t.Helper()
	start, last := time.Now(), heartbeat(t, db, node)
	passes := 0
	dentest.Eventually(t, time.Minute, fmt.Sprintf("node %s claims %d task(s)", node, len(ids)), func() bool {
		if beat := heartbeat(t, db, node); beat.After(last) {
			last = beat
			passes++
		}
		n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: -2}})
		return n == 0
	})
	return passes, time.Since(start)
}

// A task inserted by any client, with or without raising its queue's
// counts, is claimed at one of the node's next few full passes
// (newWorkPasses), whatever queue it is in: a queue a driver inserted a
// moment before (in Disbatch's 2016 schema and in Disbatch 4's), one den
// queue create made, an idle queue the node has known for long, and 20
// new queues at once; with 2,000 idle queues beside, and the node's
// timers at their defaults (a full pass a second, every queue read once a
// minute). Before, a new queue was unknown until the next read of every
// queue (up to a minute), and an idle queue's task waited for the probe
// every 5 s.
func TestNewWorkSeenAtOnce(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	const idle = 2000
	docs := make([]any, 0, idle)
	for i := range idle {
		d := bson.D{{Key: "name", Value: fmt.Sprintf("idle-%04d", i)}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 1}}
		if i%2 == 0 {
			d = append(d, bson.E{Key: "count_todo", Value: 0}, bson.E{Key: "count_total", Value: 0})
		}
		docs = append(docs, d)
	}
	res, err := db.Collection("queues").InsertMany(dentest.Context(t), docs, options.InsertMany().SetOrdered(false))
	if err != nil {
		t.Fatal(err)
	}
	old := res.InsertedIDs[idle-1].(bson.ObjectID)
	startNode(t, db, "n", func(c *den.Config) {
		c.Interval, c.SweepEvery, c.RescueEvery, c.RefreshEvery, c.ProbeEvery = 0, 0, 0, 0, 0
	})
	dentest.Eventually(t, time.Minute, "the node's first passes", func() bool { return !heartbeat(t, db, "n").IsZero() })
	waitPasses(t, db, []string{"n"}, 2, 0)

	check := func(t *testing.T, what string, ids ...bson.ObjectID) {
		t.Helper()
		passes, took := passesUntilClaimed(t, db, "n", ids...)
		if passes > newWorkPasses {
			t.Errorf("%s: claimed after %d full passes (%s); want at most %d", what, passes, took.Round(time.Millisecond), newWorkPasses)
		}
		t.Logf("%s: claimed after %d full passes, %s", what, passes, took.Round(time.Millisecond))
	}
	newQueue := func(t *testing.T, doc bson.D) bson.ObjectID {
		t.Helper()
		r, err := db.Collection("queues").InsertOne(dentest.Context(t), doc)
		if err != nil {
			t.Fatal(err)
		}
		return r.InsertedID.(bson.ObjectID)
	}
	t.Run("driver queue 2016 schema", func(t *testing.T) {
		q := newQueue(t, bson.D{{Key: "name", Value: "d2016"}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 2}})
		check(t, "a task in a queue a driver inserted (constructor, maxthreads)", driverTask(t, db, q, 0))
	})
	t.Run("driver queue Disbatch 4 schema", func(t *testing.T) {
		q := newQueue(t, bson.D{{Key: "name", Value: "d4"}, {Key: "plugin", Value: sleepPlugin}, {Key: "threads", Value: 2}})
		check(t, "a task in a queue a driver inserted (plugin, threads)", driverTask(t, db, q, 0))
	})
	t.Run("den queue create", func(t *testing.T) {
		q, err := queue.NewStore(db).CreateQueue(dentest.Context(t), "created", sleepPlugin, 2, "fifo")
		if err != nil {
			t.Fatal(err)
		}
		check(t, "a task in a queue den queue create made", driverTask(t, db, q, 0))
	})
	t.Run("counts raised", func(t *testing.T) {
		q := dentest.Queue(t, db, "counted", sleepPlugin, 2, "fifo")
		check(t, "a task with its counts raised in a new queue", dentest.Tasks(t, db, q, sleepTasks(1, 1)...)...)
	})
	t.Run("idle queue", func(t *testing.T) {
		// Inserted at different times within a pass: before, the probe
		// every 5 s let most of them wait past 3 passes. (A pace, not a
		// wait: the insert's phase within a pass is what varies.)
		for i := range 5 {
			time.Sleep(time.Duration(i) * 190 * time.Millisecond)
			check(t, fmt.Sprintf("task %d in a queue idle since the node started", i), driverTask(t, db, old, i))
		}
	})
	t.Run("20 new queues", func(t *testing.T) {
		qs := make([]any, 20)
		for i := range qs {
			qs[i] = bson.D{{Key: "name", Value: fmt.Sprintf("burst-%02d", i)}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 1}}
		}
		r, err := db.Collection("queues").InsertMany(dentest.Context(t), qs)
		if err != nil {
			t.Fatal(err)
		}
		var ids []bson.ObjectID
		for i, q := range r.InsertedIDs {
			ids = append(ids, driverTask(t, db, q.(bson.ObjectID), i))
		}
		check(t, "the tasks of 20 queues inserted at once", ids...)
	})
}

// A change a driver makes to an idle queue is honoured at the first claim
// that could take its tasks, though the node read the queue last at its
// read of every queue (a minute ago by default): a task inserted without
// counts into a queue set to maxthreads 0, into a queue whose plugin no
// node runs, or whose queue was deleted, is not claimed, and once the
// limit is back the task is claimed within newWorkPasses. Before, the probe
// found the task and the claim went by the queue's settings of the last
// read of every queue.
func TestIdleQueueChangesHonoured(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	paused := dentest.Queue(t, db, "paused", sleepPlugin, 1, "fifo")
	moved := dentest.Queue(t, db, "moved", sleepPlugin, 1, "fifo")
	deleted := dentest.Queue(t, db, "deleted", sleepPlugin, 1, "fifo")
	startNode(t, db, "n", func(c *den.Config) {
		c.Interval, c.SweepEvery, c.RescueEvery, c.RefreshEvery, c.ProbeEvery = 0, 0, 0, 0, 0
	})
	waitPasses(t, db, []string{"n"}, 2, 0)
	queues := db.Collection("queues")
	dentest.Update(t, queues, bson.D{{Key: "_id", Value: paused}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 0}}}})
	dentest.Update(t, queues, bson.D{{Key: "_id", Value: moved}}, bson.D{{Key: "$set", Value: bson.D{{Key: "constructor", Value: "No::Such::Plugin"}}}})
	dentest.Delete(t, queues, bson.D{{Key: "_id", Value: deleted}})
	held := []bson.ObjectID{driverTask(t, db, paused, 0), driverTask(t, db, moved, 0), driverTask(t, db, deleted, 0)}
	waitPasses(t, db, []string{"n"}, 4, 0)
	for i, what := range []string{"maxthreads 0", "a plugin no node runs", "deleted"} {
		if st := dentest.Task(t, db, held[i]).Lookup("status").AsInt64(); st != -2 {
			t.Errorf("the task of the queue %s has status %d; want it left queued (-2)", what, st)
		}
	}
	dentest.Update(t, queues, bson.D{{Key: "_id", Value: paused}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 1}}}})
	passes, took := passesUntilClaimed(t, db, "n", held[0])
	if passes > newWorkPasses {
		t.Errorf("the task of the queue given back its limit: claimed after %d full passes (%s); want at most %d", passes, took.Round(time.Millisecond), newWorkPasses)
	}
}
