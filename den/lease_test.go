package den_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// leaseNode starts a node whose runners beat every 1.25 s (dead_node_after
// 10 s), runs a 60-second program that writes its pid, and stops the node
// once the program runs (runners go on, by design): what the runner does
// then is its own doing, not its node's. It returns the task and the
// program.
func leaseNode(t *testing.T) (db *mongo.Database, id bson.ObjectID, prog proc) {
	t.Helper()
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo")
	pidFile := filepath.Join(t.TempDir(), "pid")
	id = dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: fmt.Sprintf("echo $$ > %s; exec sleep 60", pidFile)}})[0]
	n := startNode(t, d, "n", func(c *den.Config) { c.DeadNodeAfter = 10 * time.Second; c.MaxTermination = time.Second })
	waitFile(t, pidFile)
	dentest.Eventually(t, time.Minute, "the program's pid written", func() bool { return len(readPids(t, pidFile)) == 1 })
	prog = readProcs(t, pidFile)[0]
	t.Cleanup(prog.kill)
	n.Stop()
	if !prog.alive() {
		t.Fatal("the program ended with its node: the test proves nothing")
	}
	return d, id, prog
}

// A run whose task another node took (rescued it and started it again:
// its runner.token is another's) is stopped by its own runner at its next
// heartbeat, and nothing is written over the task. Before, the program
// ran on to its end beside the new attempt.
func TestLeaseLostStopsTheRun(t *testing.T) {
	t.Parallel()
	db, id, prog := leaseNode(t)
	other := bson.NewObjectID()
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "node", Value: "other"}, {Key: "runner.token", Value: other}}}})
	dentest.Eventually(t, 30*time.Second, "the program stopped", func() bool { return !prog.alive() })
	// Its runner records nothing over the other node's attempt: its
	// record, fenced by its token, finds the task no longer its own, and
	// it keeps the run's output in GridFS instead (keepOrphanedOutput).
	// That output, or a write over the task, says it is done.
	var raw bson.Raw
	overwritten := func() bool {
		raw = dentest.Task(t, db, id)
		node, _ := raw.Lookup("node").StringValueOK()
		token, _ := raw.Lookup("runner", "token").ObjectIDOK()
		status, _ := raw.Lookup("status").AsInt64OK()
		return node != "other" || token != other || status != 0
	}
	dentest.Eventually(t, 30*time.Second, "the runner's record of the stopped run", func() bool {
		files, err := gridfs.NewBucket(db, queue.GridFSPrefix).Find(dentest.Context(t), id)
		return (err == nil && len(files) > 0) || overwritten()
	})
	if overwritten() {
		t.Errorf("the stopped run wrote over the task another node holds: %s", raw)
	}
}

// A task cancelled while its node cannot pass the cancel on (here: the
// node is stopped) is stopped by its runner, which sees the cancel at a
// heartbeat, and ends cancelled.
func TestCancelSeenAtAHeartbeat(t *testing.T) {
	t.Parallel()
	db, id, prog := leaseNode(t)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: true}}}})
	dentest.Eventually(t, 30*time.Second, "the program stopped", func() bool { return !prog.alive() })
	dentest.Eventually(t, 30*time.Second, "the task ended cancelled", func() bool {
		raw := dentest.Task(t, db, id)
		st, _ := raw.Lookup("status").AsInt64OK()
		return st == -5
	})
}

// Two nodes whose hosts' clocks are two minutes apart, with a
// dead_node_after of one minute, agree on who holds a task: the one ahead
// does not take the other, or its running task, for dead. Before, it
// rescued the running task as a dead node's while its runner ran it.
func TestNodesAgreeWhateverTheirClocks(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "sleep", "Test::Sleep", 1, "fifo")
	id := dentest.Tasks(t, d, qid, bson.D{{Key: "ms", Value: 8000}})[0]
	short := func(c *den.Config) { c.DeadNodeAfter = time.Minute }
	startNode(t, d, "b", short)
	dentest.Eventually(t, time.Minute, "node b runs the task", func() bool {
		raw := dentest.Task(t, d, id)
		st, _ := raw.Lookup("status").AsInt64OK()
		return st == 0
	})
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	nodetest.StartClock(t, d, "a", ahead, short)
	dentest.Eventually(t, time.Minute, "the task ends", func() bool {
		raw := dentest.Task(t, d, id)
		st, _ := raw.Lookup("status").AsInt64OK()
		return st != 0 && st != -1
	})
	raw := dentest.Task(t, d, id)
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || raw.Lookup("history").Type != 0 || raw.Lookup("node").StringValue() != "b" {
		t.Errorf("the task was taken from the node running it: %s", raw)
	}
}

// A runner cut off from the database (every command refused, as during a
// partition) stops its run once no heartbeat has landed for its lease
// less the time to stop (here 5 s of a 10 s dead_node_after), before any
// node may rescue the task; when the database answers again it records
// the run as lease_lost. Before, the program ran on through the outage.
func TestCutOffRunnerStopsItsRun(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	p := dentest.Faults(t, 1)
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo")
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: fmt.Sprintf("echo $$ > %s; exec sleep 60", pidFile)}})[0]
	startNode(t, p.Client(t).Database(d.Name()), "n", func(c *den.Config) {
		c.URI = p.URI()
		c.Runner.Direct = true
		c.DeadNodeAfter = 10 * time.Second
		c.MaxTermination = time.Second
	})
	waitFile(t, pidFile)
	dentest.Eventually(t, time.Minute, "the program's pid written", func() bool { return len(readPids(t, pidFile)) == 1 })
	prog := readProcs(t, pidFile)[0]
	t.Cleanup(prog.kill)
	const outage = 30 * time.Second
	cut := time.Now()
	p.Refuse(outage)
	dentest.Eventually(t, outage, "the program stopped while its runner is cut off", func() bool { return !prog.alive() })
	if took := time.Since(cut); took >= outage {
		t.Fatalf("the program stopped only after the outage (%s)", took)
	}
	dentest.Eventually(t, 2*time.Minute, "the run recorded as lease_lost", func() bool {
		raw := dentest.Task(t, d, id)
		o, _ := raw.Lookup("outcome").StringValueOK()
		return o == "lease_lost"
	})
}
