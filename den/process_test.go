package den_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// nodeProcess starts this test binary as a node process.
func nodeProcess(t *testing.T, db *mongo.Database, name string, extraEnv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		dentest.EnvRole+"=node", envNodeURI+"="+dentest.URI(), envNodeDB+"="+db.Name(), envNodeName+"="+name,
		envNodeRunLog+"="+filepath.Join(t.TempDir(), "runners.log"))
	cmd.Env = append(cmd.Env, extraEnv...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("log of node %s:\n%s", name, b)
		}
	})
	return cmd, bufio.NewScanner(out)
}

// The node is killed with SIGKILL while tasks run. Its runners are in
// sessions of their own and finish; the restarted node finishes the rest;
// no task runs twice.
func TestNodeKilledAndRestarted(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 3, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(9, 1500)...)
	node, _ := nodeProcess(t, db, "victim")
	dentest.Eventually(t, 2*time.Minute, "three tasks running", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "status", Value: 0}}) == 3
	})
	running := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: 0}})
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node.Wait()
	// The runners outlive the node and finish their tasks.
	dentest.Eventually(t, 2*time.Minute, "running tasks finished without the node", func() bool {
		return countDone(t, db)() >= running
	})
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-6, 2}}}}}); n != 0 {
		t.Fatalf("%d tasks orphaned or failed by the kill", n)
	}
	nodeProcess(t, db, "victim")
	dentest.Eventually(t, 2*time.Minute, "all tasks finished after the restart", func() bool { return countDone(t, db)() == int64(len(ids)) })
	for _, id := range ids {
		if n := dentest.Count(t, db.Collection("runs"), bson.D{{Key: "task_id", Value: id}}); n != 1 {
			t.Errorf("task %s ran %d times", id.Hex(), n)
		}
	}
}

// SIGTERM between a claim and its hand-over to a runner: the node puts the
// task back, writes its node document and exits 0 promptly.
func TestSIGTERMPutsClaimedTaskBack(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(1, 0)...)
	node, out := nodeProcess(t, db, "stopper", envHandOverWait+"=3000")
	if !out.Scan() || out.Text() != "claimed" {
		t.Fatalf("node did not claim: %q", out.Text())
	}
	raw := dentest.Task(t, db, ids[0])
	if st, _ := raw.Lookup("status").AsInt64OK(); st != -1 || raw.Lookup("node").StringValue() != "stopper" {
		t.Fatalf("task not claimed by the node: %s", raw)
	}
	sent := time.Now()
	if err := node.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := node.Wait(); err != nil {
		t.Fatalf("node exited with %v, want 0", err)
	}
	t.Logf("node exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	raw = dentest.Task(t, db, ids[0])
	st, _ := raw.Lookup("status").AsInt64OK()
	node2, _ := raw.Lookup("node").AsInt64OK()
	if st != -2 || node2 != -1 {
		t.Fatalf("task not put back: %s", raw)
	}
	nd, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "stopper"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if ts := nd.Lookup("timestamp").Time(); ts.Before(sent.Add(-time.Second)) {
		t.Fatalf("node document not updated at shutdown: %s", ts)
	}
}

// Malformed input never stops the node: bad tasks are failed with a
// reason, a bad queue is skipped with one warning, a nonsense maxthreads
// is one warning, and the good queue keeps working.
func TestBadInput(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	good := dentest.Queue(t, db, "good", sleepPlugin, 2, "fifo")
	silly := dentest.Queue(t, db, "silly", sleepPlugin, 0, "fifo")
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: silly}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: "lots"}}}})
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "name", Value: "no plugin field"}})
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "name", Value: "unknown plugin"}, {Key: "constructor", Value: "Nope::Plugin"}})
	stringQueue, stringStatus, noParams := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"),
		bson.D{{Key: "_id", Value: stringQueue}, {Key: "queue", Value: good.Hex()}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}},
		bson.D{{Key: "_id", Value: stringStatus}, {Key: "queue", Value: good}, {Key: "status", Value: "-2"}, {Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}},
		bson.D{{Key: "_id", Value: noParams}, {Key: "queue", Value: good}, {Key: "status", Value: -2}, {Key: "node", Value: -1}},
	)
	okIDs := dentest.Tasks(t, db, good, sleepTasks(3, 0)...)
	n := startNode(t, db, "n")
	dentest.Eventually(t, time.Minute, "good tasks done", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: okIDs}}}, {Key: "status", Value: 1}}) == 3
	})
	for id, reason := range map[bson.ObjectID]string{
		stringQueue:  "queue field is the string",
		stringStatus: "status is a string",
		noParams:     "parameters is missing",
	} {
		dentest.Eventually(t, time.Minute, "malformed task failed", func() bool {
			st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK()
			return st == 2
		})
		stderr := dentest.Task(t, db, id).Lookup("stderr").StringValue()
		if !strings.Contains(stderr, reason) {
			t.Errorf("task %s stderr %q lacks %q", id.Hex(), stderr, reason)
		}
	}
	// Several more passes: each problem is still logged exactly once.
	waitPasses(t, db, []string{"n"}, 3, 0)
	for _, msg := range []string{"queue document skipped", "queue has a bad maxthreads", "queue skipped: no plugin"} {
		if c := n.logs.FilterMessageSnippet(msg).Len(); c != 1 {
			t.Errorf("%q logged %d times, want once", msg, c)
		}
	}
	// Fixing the limit is logged once too.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: silly}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 1}}}})
	dentest.Eventually(t, time.Minute, "fix noticed", func() bool { return n.logs.FilterMessage("queue problem cleared").Len() == 1 })
}

// A node reaps its own orphans: tasks it claimed long ago that no runner
// started, whatever kind of mtime they carry.
func TestNodeReapsItsOrphans(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Not::Here", 1, "fifo")
	old := time.Now().Add(-10 * time.Minute)
	ids := []bson.ObjectID{bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()}
	dentest.Insert(t, db.Collection("tasks"),
		bson.D{{Key: "_id", Value: ids[0]}, {Key: "queue", Value: qid}, {Key: "status", Value: -1}, {Key: "node", Value: "n"}, {Key: "mtime", Value: old}},
		bson.D{{Key: "_id", Value: ids[1]}, {Key: "queue", Value: qid}, {Key: "status", Value: -1}, {Key: "node", Value: "n"}, {Key: "mtime", Value: old.Unix()}},
		bson.D{{Key: "_id", Value: ids[2]}, {Key: "queue", Value: qid}, {Key: "status", Value: -1}, {Key: "node", Value: "other"}, {Key: "mtime", Value: old}},
	)
	startNode(t, db, "n")
	dentest.Eventually(t, time.Minute, "orphans reaped", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -6}}) == 2
	})
	if st, _ := dentest.Task(t, db, ids[2]).Lookup("status").AsInt64OK(); st != -1 {
		t.Fatal("reaped another node's task")
	}
}
