package nodetest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/plugins/demo"
)

func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{"task-runner": nodetest.RunnerRole})
}

// writeFaults are rules that fault about rate of every write command of
// the nodes and their runners (findAndModify, update, insert, delete),
// split evenly between a reply lost after the write, a NotWritablePrimary
// answer and a connection dropped before the command.
func writeFaults(rate float64) []dentest.Rule {
	var rules []dentest.Rule
	for _, cmd := range []string{"findAndModify", "update", "insert", "delete"} {
		for _, f := range []dentest.Fault{dentest.LoseReply, dentest.NotWritablePrimary, dentest.DropBefore} {
			rules = append(rules, dentest.Rule{Command: cmd, Fault: f, Rate: rate / 3})
		}
	}
	return rules
}

// Three nodes run Demo tasks while a tenth of their writes (and their
// runners') meet a fault. Every task must end: a claim whose reply was
// lost, or whose hand-over failed, is found by its node and started or
// put back, never left claimed for orphan_age (an hour here, so that the
// rescue of stale claims cannot hide it).
func TestEveryTaskEndsUnderWriteFaults(t *testing.T) {
	dentest.EndToEnd(t)
	const tasks = 150
	db := dentest.DB(t)
	p := dentest.Faults(t, 20, writeFaults(0.10)...)
	faulted := p.Client(t).Database(db.Name())
	qid := dentest.Queue(t, db, "demo", demo.Name, 5, "fifo")
	params := make([]bson.D, tasks)
	for i := range params {
		params[i] = bson.D{{Key: "commands", Value: "a"}, {Key: "noreport", Value: true}}
	}
	ids := dentest.Tasks(t, db, qid, params...)
	for i := range 3 {
		nodetest.Start(t, faulted, fmt.Sprintf("node-%d", i), func(c *den.Config) {
			c.URI = p.URI()
			c.OrphanAge = time.Hour
		})
	}
	// Ended: any status but queued (-2), claimed (-1) and running (0).
	ended := bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{-2, -1, 0}}}}}
	deadline := time.Now().Add(4 * time.Minute)
	for dentest.CountTasks(t, db, ended) < int64(len(ids)) {
		if time.Now().After(deadline) {
			t.Fatalf("after 4 minutes, %d of %d tasks have not ended (%d faults injected): %s",
				int64(len(ids))-dentest.CountTasks(t, db, ended), len(ids), len(p.Injected()), unended(t, db))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d tasks ended; %d faults injected", len(ids), len(p.Injected()))
}

// unended describes the tasks that have not ended: status, node, and
// whether a runner is recorded.
func unended(t *testing.T, db *mongo.Database) string {
	t.Helper()
	cur, err := db.Collection("tasks").Find(dentest.Context(t), bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-2, -1, 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(dentest.Context(t), &docs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range docs {
		out = append(out, fmt.Sprintf("task %s status %v node %v runner %v mtime %v",
			d.Lookup("_id").ObjectID().Hex(), d.Lookup("status"), d.Lookup("node"), d.Lookup("runner").Type != 0, d.Lookup("mtime")))
	}
	return strings.Join(out, "; ")
}

// A claim whose reply was lost, and whose put-back failed too, leaves a
// task claimed by the node with no runner. The node reads its own claims
// every full pass: it must start that task or put it back, not leave it
// for orphan_age (an hour here).
func TestLostClaimIsNotLeftClaimed(t *testing.T) {
	dentest.EndToEnd(t)
	db := dentest.DB(t)
	// The first claim lands with its reply lost; from then on every
	// update of tasks fails (the put-back of the lost claim first) until
	// the test lifts the faults.
	p := dentest.Faults(t, 1,
		dentest.Rule{Command: "findAndModify", Collection: "tasks", Fault: dentest.LoseReply, Nth: 1},
		dentest.Rule{Command: "update", Collection: "tasks", Fault: dentest.DropBefore, Rate: 1, After: 1})
	faulted := p.Client(t).Database(db.Name())
	qid := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}, {Key: "noreport", Value: true}})
	nodetest.Start(t, faulted, "node-0", func(c *den.Config) {
		c.URI = p.URI()
		c.OrphanAge = time.Hour
	})
	dentest.Eventually(t, 2*time.Minute, "the claim's reply lost and an update of tasks failed after it", func() bool {
		lost := false
		for _, f := range p.Injected() {
			if f.Fault == dentest.LoseReply {
				lost = true
			} else if lost && f.Command == "update" {
				return true
			}
		}
		return false
	})
	if n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: ids[0]}, {Key: "status", Value: -1}, {Key: "node", Value: "node-0"}}); n != 1 {
		t.Fatalf("the task whose claim reply was lost is not claimed by node-0: %s", unended(t, db))
	}
	p.Set()
	deadline := time.Now().Add(2 * time.Minute)
	for dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: ids[0]}, {Key: "status", Value: 1}}) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after the faults ended, the task has not run: %s", unended(t, db))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
