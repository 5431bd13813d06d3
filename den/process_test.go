package den_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// nodeProcess starts this test binary as a node process.
func nodeProcess(t *testing.T, db *mongo.Database, name string, extraEnv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	return nodeProcessWith(t, db, name, nil, extraEnv...)
}

// nodeProcessWith is nodeProcess with the process's attributes (nil:
// none).
func nodeProcessWith(t *testing.T, db *mongo.Database, name string, attr *syscall.SysProcAttr, extraEnv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	dentest.EndToEnd(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.SysProcAttr = attr
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
		if attr != nil && attr.Cloneflags != 0 && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC)) {
			t.Skipf("this machine refuses new namespaces (clone flags %#x) to the test, so it cannot start a node as another host: %v", attr.Cloneflags, err)
		}
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
	waitSleeping(t, db, qid, running)
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node.Wait()
	// The runners outlive the node and finish their tasks.
	dentest.Eventually(t, 2*time.Minute, "running tasks finished without the node", func() bool {
		return countDone(t, db)() >= running
	})
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-6, 2}}}}}); n != 0 {
		var bad []string
		for _, id := range ids {
			raw := dentest.Task(t, db, id)
			if st, _ := raw.Lookup("status").AsInt64OK(); st == -6 || st == 2 {
				bad = append(bad, fmt.Sprintf("%s status %d stderr %q", id.Hex(), st, field(raw, "stderr")))
			}
		}
		t.Fatalf("%d tasks orphaned or failed by the kill: %s", n, strings.Join(bad, "; "))
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
	node, out := nodeProcess(t, db, "stopper", envHandOverHold+"=1")
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
		if c := n.Logs.FilterMessageSnippet(msg).Len(); c != 1 {
			t.Errorf("%q logged %d times, want once", msg, c)
		}
	}
	// Fixing the limit is logged once too.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: silly}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 1}}}})
	dentest.Eventually(t, time.Minute, "fix noticed", func() bool { return n.Logs.FilterMessage("queue problems cleared").Len() == 1 })
}

// Every state a dead or misbehaving writer can leave a task in is
// resolved by a running node:
//   - its own claims that no runner started within orphan_age are rescued,
//     whatever kind of mtime they carry: retried when retries are left
//     (history says why), else orphaned (-6);
//   - claims of a node name that has no node document are rescued the same
//     way once their mtime is dead_node_after old;
//   - a task at 0 under its own name with no runner recorded is rescued
//     after dead_node_after, so the task queued behind it runs;
//   - a live node's claims are left alone.
func TestNodeResolvesStuckTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Not::Here", 1, "fifo")
	busy := dentest.Queue(t, db, "busy", sleepPlugin, 1, "fifo")
	ctx := dentest.Context(t)
	if _, err := db.Collection("nodes").InsertOne(ctx, bson.D{{Key: "node", Value: "alive"}, {Key: "timestamp", Value: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	startNode(t, db, "n", func(c *den.Config) { c.OrphanAge = time.Minute; c.DeadNodeAfter = time.Minute })
	// Running (past its start, which puts back its earlier claims).
	waitPasses(t, db, []string{"n"}, 1, 0)
	old := time.Now().Add(-10 * time.Minute)
	type stuck struct {
		node   any
		status int
		mtime  any
		extra  bson.E
		want   int64
	}
	cases := map[string]stuck{
		"own claim, ISODate":          {"n", -1, old, bson.E{}, -6},
		"own claim, epoch seconds":    {"n", -1, old.Unix(), bson.E{}, -6},
		"own claim, retries left":     {"n", -1, old, bson.E{Key: "max_retries", Value: 2}, -2},
		"unknown node's claim":        {"ghost", -1, old, bson.E{}, -6},
		"unknown node's running task": {"ghost", 0, old, bson.E{}, -6},
		"non-string node":             {int32(7), 0, old, bson.E{}, -6},
		"live node's claim":           {"alive", -1, old, bson.E{}, -1},
		"unknown node, recent":        {"ghost", -1, time.Now().Add(time.Hour), bson.E{}, -1},
	}
	ids := map[string]bson.ObjectID{}
	var docs []any
	for name, c := range cases {
		ids[name] = bson.NewObjectID()
		doc := bson.D{{Key: "_id", Value: ids[name]}, {Key: "queue", Value: qid}, {Key: "status", Value: c.status}, {Key: "node", Value: c.node}, {Key: "mtime", Value: c.mtime}, {Key: "parameters", Value: bson.D{}}}
		if c.extra.Key != "" {
			doc = append(doc, c.extra)
		}
		docs = append(docs, doc)
	}
	// A task held at 0 under this node's name with no runner, at the head
	// of a queue with maxthreads 1, and a task queued behind it.
	held := bson.NewObjectID()
	docs = append(docs, bson.D{{Key: "_id", Value: held}, {Key: "queue", Value: busy}, {Key: "status", Value: 0}, {Key: "node", Value: "n"}, {Key: "mtime", Value: old}, {Key: "parameters", Value: bson.D{}}})
	if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	behind := dentest.Tasks(t, db, busy, sleepTasks(1, 0)...)[0]
	for name, c := range cases {
		if c.want == int64(c.status) {
			continue
		}
		dentest.Eventually(t, time.Minute, name+" resolved", func() bool { return status(t, db, ids[name]) == c.want })
	}
	dentest.WaitStatus(t, db, behind, 1)
	if st := status(t, db, held); st != -6 {
		t.Errorf("task held at 0 without a runner has status %d, want -6", st)
	}
	raw := dentest.Task(t, db, ids["own claim, retries left"])
	if r := raw.Lookup("history", "0", "reason").StringValue(); !strings.Contains(r, "never started") {
		t.Errorf("history of a retried stale claim says %q", r)
	}
	// Rescue passes that started after all that (rescue_every is 200ms):
	// what must be left alone still is.
	waitPasses(t, db, []string{"n"}, 2, 200*time.Millisecond)
	for name, c := range cases {
		if c.want == int64(c.status) {
			if st := status(t, db, ids[name]); st != c.want {
				t.Errorf("%s: status %d, want it left at %d", name, st, c.want)
			}
		}
	}
}

// A node restarted under the same name puts back the claims of its earlier
// life at once: a task it had claimed, never started, with retries left or
// not, goes back to its queue and runs.
func TestRestartedNodeReleasesItsClaims(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	for _, id := range ids {
		dentest.Claim(t, db, id, "n", bson.E{Key: "mtime", Value: time.Now()})
	}
	n := startNode(t, db, "n")
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	if c := n.Logs.FilterMessageSnippet("put back tasks this node had claimed before it restarted").Len(); c != 1 {
		t.Errorf("release logged %d times, want once", c)
	}
}
