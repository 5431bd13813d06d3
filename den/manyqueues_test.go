package den_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// A node's claims cost what the queues with work ask, not what the
// database holds: with 2,000 queues it serves that have nothing to do
// (half of them inserted without their counts, as a script with a driver
// leaves them, half with count_todo 0), its first passes claim the task of
// the one queue with work and then make no more than a handful of claims,
// where they made one for every 50 queues. (BenchmarkManyQueues measures
// 80,000.)
func TestClaimsFollowTheQueuesWithWork(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	// Counts the claims (findAndModify of tasks setting status -1) and
	// faults none.
	p := dentest.Faults(t, 1, dentest.Rule{Command: "findAndModify", Collection: "tasks", Match: func(docs []bson.Raw) bool {
		if st, ok := docs[0].Lookup("update", "$set", "status").AsInt64OK(); ok && st == -1 {
			claims.Add(1)
		}
		return false
	}})
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	const idle = 2000
	docs := make([]any, 0, idle)
	for i := range idle {
		d := bson.D{{Key: "name", Value: fmt.Sprintf("idle-%04d", i)}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 1}, {Key: "sort", Value: "fifo"}}
		if i%2 == 0 {
			d = append(d, bson.E{Key: "count_todo", Value: 0}, bson.E{Key: "count_total", Value: 0})
		}
		docs = append(docs, d)
	}
	if _, err := direct.Collection("queues").InsertMany(dentest.Context(t), docs, options.InsertMany().SetOrdered(false)); err != nil {
		t.Fatal(err)
	}
	target := dentest.Queue(t, db, "target", sleepPlugin, 1, "fifo")
	task := dentest.Tasks(t, db, target, sleepTasks(1, 1)...)[0]
	startNode(t, db, "n", func(c *den.Config) { c.URI = p.URI() })
	dentest.WaitStatus(t, db, task, 1)
	// Passes enough for the counts of the queues without them to be
	// filled in and probed: none of that is a reason to claim.
	waitPasses(t, db, []string{"n"}, 10, 200*time.Millisecond)
	if n := claims.Load(); n > 6 {
		t.Errorf("%d claims for one task among %d queues with nothing to do; want a handful", n, idle)
	}
	t.Logf("%d claims", claims.Load())
}

// Between its reads of every queue (every RefreshEvery: an hour here), a
// node's passes read the queues with work only, and still see at once what
// changes there: raising the limit of the queue with work starts its
// second task at the next pass, and a new queue's task is claimed as
// soon; neither read the 500 idle queues again, except the one pass that
// follows a new queue.
func TestPassesReadTheQueuesWithWork(t *testing.T) {
	t.Parallel()
	var full, partial atomic.Int64
	// Counts the reads of queues by their filter, and faults none.
	p := dentest.Faults(t, 1, dentest.Rule{Command: "find", Collection: "queues", Match: func(docs []bson.Raw) bool {
		if f, ok := docs[0].Lookup("filter").DocumentOK(); ok {
			if elems, _ := f.Elements(); len(elems) == 0 {
				full.Add(1)
			} else {
				partial.Add(1)
			}
		}
		return false
	}})
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	for i := range 500 {
		dentest.Queue(t, direct, fmt.Sprintf("idle-%03d", i), sleepPlugin, 1, "fifo")
	}
	busy := dentest.Queue(t, direct, "busy", sleepPlugin, 1, "fifo")
	long := dentest.Tasks(t, direct, busy, sleepTasks(2, 600000)...)
	startNode(t, db, "n", func(c *den.Config) { c.URI = p.URI(); c.RefreshEvery = time.Hour })
	dentest.WaitStatus(t, direct, long[0], 0)
	t.Cleanup(func() {
		for _, id := range long {
			cancel(t, direct, id)
		}
		for _, id := range long {
			dentest.WaitStatus(t, direct, id, -5)
		}
	})
	waitPasses(t, direct, []string{"n"}, 3, 0)
	fullBefore, partialBefore := full.Load(), partial.Load()

	dentest.Update(t, direct.Collection("queues"), bson.D{{Key: "_id", Value: busy}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 2}}}})
	dentest.WaitStatus(t, direct, long[1], 0)
	waitPasses(t, direct, []string{"n"}, 5, 0)
	if n := full.Load() - fullBefore; n != 0 {
		t.Errorf("%d reads of every queue in passes that had only the busy queue's change to see; want none", n)
	}
	if n := partial.Load() - partialBefore; n < 5 {
		t.Errorf("%d reads of the queues with work in 5 passes", n)
	}

	fresh := dentest.Queue(t, direct, "fresh", sleepPlugin, 1, "fifo")
	task := dentest.Tasks(t, direct, fresh, sleepTasks(1, 1)...)[0]
	dentest.WaitStatus(t, direct, task, 1)
	t.Logf("%d reads of every queue, %d of the queues with work", full.Load(), partial.Load())
}
