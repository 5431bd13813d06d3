package den_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A node whose passes are an hour apart still runs a queue's tasks one
// after the other: each finished runner frees a slot, and the slot claims
// at once, without waiting for a pass.
func TestFreedSlotClaimsAtOnce(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(4, 10)...)
	startNode(t, db, "n", func(c *den.Config) { c.Interval = time.Hour })
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	if p := peak(t, db, "queue:"+qid.Hex()+":n"); p != 1 {
		t.Fatalf("peak %d tasks at once in a queue of maxthreads 1", p)
	}
}

// insertBare inserts a queued task as a careless writer does: without
// raising the queue's counts, so that only a probe or an arrival tells the
// node of it.
func insertBare(t *testing.T, db *mongo.Database, qid bson.ObjectID) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusQueued},
		{Key: "node", Value: queue.Unclaimed}, {Key: "parameters", Value: bson.D{{Key: "ms", Value: 1}}}})
	return id
}

// waitClaimedNothing waits until the node's first pass has found the queue
// empty.
func waitClaimedNothing(t *testing.T, db *mongo.Database, node string) {
	t.Helper()
	waitPasses(t, db, []string{node}, 2, 100*time.Millisecond)
}

// Tasks inserted without raising count_todo/count_total, into a queue the
// node has found empty, are found by the periodic probe.
func TestProbeFindsTasksInsertedWithoutCounts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qids := make([]bson.ObjectID, 3)
	for i := range qids {
		qids[i] = dentest.Queue(t, db, fmt.Sprint("q", i), sleepPlugin, 2, []string{"fifo", "lifo", "default"}[i])
	}
	startNode(t, db, "n")
	waitClaimedNothing(t, db, "n")
	var ids []bson.ObjectID
	for _, q := range qids {
		ids = append(ids, insertBare(t, db, q), insertBare(t, db, q))
	}
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
}

// arrivalsFrom is an ArrivalSource fed by the test: it stands for a
// replica set's change stream, which the development server lacks.
type arrivalsFrom chan bson.ObjectID

func (a arrivalsFrom) Watch(ctx context.Context, arrived func(bson.ObjectID)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case q := <-a:
			arrived(q)
		}
	}
}

// An arrival (a change stream event) makes its queue's new task start at
// once, although neither the counts nor a pass nor a probe tell of it.
func TestArrivalClaimsAtOnce(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	arrivals := make(arrivalsFrom)
	var sig den.TestSignals
	sig.Init()
	startNode(t, db, "n", func(c *den.Config) {
		c.Interval, c.ProbeEvery, c.Arrivals, c.Signals = time.Hour, time.Hour, arrivals, &sig
	})
	// The first pass has run, found the queue empty and marked it.
	sig.PassDone.Wait(t, "the node's first pass")
	id := insertBare(t, db, qid)
	arrivals <- qid
	sig.TaskEnded.WaitFor(t, "the task to end", func(e den.TaskEnd) bool { return e.Task == id })
	if st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK(); st != 1 {
		t.Fatalf("the task ended with status %d, want 1", st)
	}
}

// Without change streams (the development server), the node says so once
// and new tasks still start, by polling.
func TestNoChangeStreamsMeansPolling(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	n := startNode(t, db, "n")
	dentest.Eventually(t, time.Minute, "the node to tell it polls", func() bool {
		return n.Logs.FilterMessage("no change streams on this server (a replica set has them): new tasks are seen by polling every interval").Len() == 1
	})
	ids := dentest.Tasks(t, db, qid, sleepTasks(3, 1)...)
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
}

// One claim serves many queues, and each queue's maxthreads still holds.
func TestBatchedClaimsKeepEachQueuesLimit(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	var qids []bson.ObjectID
	var ids []bson.ObjectID
	for i := range 12 {
		q := dentest.Queue(t, db, fmt.Sprint("q", i), sleepPlugin, 1+i%2, []string{"fifo", "lifo", "default"}[i%3])
		qids = append(qids, q)
		ids = append(ids, dentest.Tasks(t, db, q, sleepTasks(3, 150)...)...)
	}
	startNode(t, db, "n")
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	for i, q := range qids {
		if p, limit := peak(t, db, "queue:"+q.Hex()+":n"), int64(1+i%2); p > limit || p < 1 {
			t.Errorf("queue %d: peak %d at once, maxthreads %d", i, p, limit)
		}
	}
}
