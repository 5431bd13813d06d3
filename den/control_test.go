package den_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

func status(t *testing.T, db *mongo.Database, id bson.ObjectID) int64 {
	st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK()
	return st
}

func waitFor(t *testing.T, db *mongo.Database, id bson.ObjectID, want int64) bson.Raw {
	t.Helper()
	dentest.Eventually(t, 2*time.Minute, "task status "+string(rune('0'+want)), func() bool { return status(t, db, id) == want })
	return dentest.Task(t, db, id)
}

func cancel(t *testing.T, db *mongo.Database, id bson.ObjectID) {
	t.Helper()
	// Exactly what the README tells users to type.
	_, err := db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: true}}}})
	if err != nil {
		t.Fatal(err)
	}
}

func runnerPID(t *testing.T, db *mongo.Database, id bson.ObjectID) int {
	pid, _ := dentest.Task(t, db, id).Lookup("runner", "pid").AsInt64OK()
	return int(pid)
}

func TestCancelQueuedTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	cancel(t, db, ids[0])
	startNode(t, db, "n")
	waitFor(t, db, ids[1], 1)
	raw := waitFor(t, db, ids[0], -5)
	if n, _ := db.Collection("runs").CountDocuments(dentest.Context(t), bson.D{{Key: "task_id", Value: ids[0]}}); n != 0 {
		t.Fatal("a cancelled queued task ran")
	}
	if !strings.Contains(raw.Lookup("stderr").StringValue(), "cancelled before it started") {
		t.Errorf("stderr %s", raw.Lookup("stderr"))
	}
}

// A running program that ignores SIGTERM is killed after the grace time;
// the task ends cancelled (-5) with the output it produced.
func TestCancelRunningStubbornProgram(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	mark := filepath.Join(t.TempDir(), "started")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: `trap "" TERM; echo started; touch ` + mark + `; while true; do sleep 1; done`}})[0]
	startNode(t, db, "n")
	waitFor(t, db, id, 0)
	// The trap is set and the line printed (a slow machine may take a
	// while to start the shell).
	dentest.Eventually(t, time.Minute, "program started", func() bool { _, err := os.Stat(mark); return err == nil })
	pid := runnerPID(t, db, id)
	sent := time.Now()
	cancel(t, db, id)
	raw := waitFor(t, db, id, -5)
	t.Logf("cancelled %s after the request", time.Since(sent).Round(time.Millisecond))
	if raw.Lookup("stdout").StringValue() != "started\n" {
		t.Errorf("partial output not kept: stdout %s", raw.Lookup("stdout"))
	}
	stderr := raw.Lookup("stderr").StringValue()
	if !strings.Contains(stderr, "SIGKILL") || !strings.Contains(stderr, "cancelled while running") {
		t.Errorf("stderr %q", stderr)
	}
	dentest.Eventually(t, time.Minute, "runner gone", func() bool { return syscall.Kill(pid, 0) != nil })
}

// A runner killed with SIGKILL mid-task: its task is rescued, retried when
// it has retries left.
func TestKilledRunnerIsRescued(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 60000)...)
	db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: ids[1]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 1}, {Key: "retry_delay", Value: 1}}}})
	startNode(t, db, "n")
	waitFor(t, db, ids[0], 0)
	waitFor(t, db, ids[1], 0)
	syscall.Kill(runnerPID(t, db, ids[0]), syscall.SIGKILL)
	raw := waitFor(t, db, ids[0], -6)
	// The node's watch of its child ("died") or its periodic check ("is
	// gone"), whichever sees it first.
	if reason := raw.Lookup("orphan_reason").StringValue(); !strings.Contains(reason, "died") && !strings.Contains(reason, "is gone") {
		t.Errorf("orphan_reason %s", raw.Lookup("orphan_reason"))
	}
	// The second one had a retry left: it is run again and succeeds.
	syscall.Kill(runnerPID(t, db, ids[1]), syscall.SIGKILL)
	db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: ids[1]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "parameters.ms", Value: 0}}}})
	raw = waitFor(t, db, ids[1], 1)
	if a, _ := raw.Lookup("attempts").AsInt64OK(); a != 1 {
		t.Errorf("attempts %d, want 1", a)
	}
	h, _ := raw.Lookup("history").Array().Values()
	if len(h) != 1 || h[0].Document().Lookup("status").AsInt64() != -6 {
		t.Errorf("history %v", h)
	}
}

// The node is SIGKILLed; one of its runners is then killed too. The
// restarted node leaves the live runner alone and rescues the dead one.
func TestRestartedNodeRescuesOnlyDeadRunners(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 4000)...)
	node, _ := nodeProcess(t, db, "phoenix")
	waitFor(t, db, ids[0], 0)
	waitFor(t, db, ids[1], 0)
	node.Process.Signal(syscall.SIGKILL)
	node.Wait()
	syscall.Kill(runnerPID(t, db, ids[0]), syscall.SIGKILL)
	nodeProcess(t, db, "phoenix")
	waitFor(t, db, ids[0], -6)
	waitFor(t, db, ids[1], 1)
	if n, _ := db.Collection("runs").CountDocuments(dentest.Context(t), bson.D{{Key: "task_id", Value: ids[1]}}); n != 1 {
		t.Fatalf("live task ran %d times", n)
	}
}

// A node stopped writing its document long ago, with tasks claimed and
// running; three live nodes notice at once, and each task is rescued
// exactly once. When the "dead" node's runner comes back and tries to
// record its result, the rescued state stays.
func TestDeadNodeRescuedOnce(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "unserved", "Not::Here", 0, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 3600})
	old := time.Now().Add(-time.Hour)
	db.Collection("nodes").InsertOne(ctx, bson.D{{Key: "node", Value: "ghost"}, {Key: "timestamp", Value: old}})
	var ids []bson.ObjectID
	for i := range 6 {
		id := bson.NewObjectID()
		ids = append(ids, id)
		st := -1
		doc := bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "node", Value: "ghost"}, {Key: "mtime", Value: old}, {Key: "parameters", Value: bson.D{}}}
		if i%2 == 0 {
			st = 0
			doc = append(doc, bson.E{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 1}, {Key: "host", Value: "elsewhere"}}})
		}
		if i >= 4 {
			doc = append(doc, bson.E{Key: "max_retries", Value: 0})
		}
		doc = append(doc, bson.E{Key: "status", Value: st})
		db.Collection("tasks").InsertOne(ctx, doc)
	}
	fast := func(c *den.Config) { c.DeadNodeAfter = time.Minute }
	nodes := []running{startNode(t, db, "live1", fast), startNode(t, db, "live2", fast), startNode(t, db, "live3", fast)}
	dentest.Eventually(t, time.Minute, "ghost's tasks rescued", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "node", Value: "ghost"}}) == 2 // the two orphaned keep node ghost
	})
	time.Sleep(time.Second) // more passes: nothing is rescued twice
	for i, id := range ids {
		raw := dentest.Task(t, db, id)
		st, _ := raw.Lookup("status").AsInt64OK()
		attempts, _ := raw.Lookup("attempts").AsInt64OK()
		h, _ := raw.Lookup("history").ArrayOK()
		entries, _ := h.Values()
		switch {
		case i >= 4 && st != -6:
			t.Errorf("task %d without retries: status %d, want -6", i, st)
		case i < 4 && (st != -2 || attempts != 1 || len(entries) != 1):
			t.Errorf("task %d: status %d attempts %d history %d; want -2, 1, 1", i, st, attempts, len(entries))
		}
	}
	total := 0
	for _, n := range nodes {
		for _, e := range n.logs.FilterMessage("rescued the tasks of a dead or unknown node").All() {
			if e.ContextMap()["dead_node"] != "ghost" {
				t.Errorf("log names %v", e.ContextMap()["dead_node"])
			}
			total += int(e.ContextMap()["orphaned"].(int64) + e.ContextMap()["retried"].(int64))
		}
	}
	if total != 6 {
		t.Errorf("nodes reported %d rescues, want 6", total)
	}
}

// A task that fails twice then succeeds: two history entries, attempts 2,
// and each retry waited its backoff.
func TestRetriesWithHistoryAndBackoff(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", flakyPlugin, 1, "fifo", bson.E{Key: "max_retries", Value: 3}, bson.E{Key: "retry_delay", Value: 1})
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "succeed_on", Value: 3}})[0]
	startNode(t, db, "n")
	raw := waitFor(t, db, id, 1)
	if a, _ := raw.Lookup("attempts").AsInt64OK(); a != 2 {
		t.Errorf("attempts %d, want 2", a)
	}
	h, _ := raw.Lookup("history").Array().Values()
	if len(h) != 2 {
		t.Fatalf("history has %d entries, want 2", len(h))
	}
	for i, e := range h {
		d := e.Document()
		if d.Lookup("attempt").AsInt64() != int64(i+1) || d.Lookup("status").AsInt64() != 2 || d.Lookup("node").StringValue() != "n" {
			t.Errorf("history %d: %s", i, d)
		}
		if _, ok := d.Lookup("stderr").ObjectIDOK(); !ok {
			t.Errorf("history %d has no stderr file", i)
		}
	}
	// Backoff: retry n waits retry_delay * 2^(n-1), jittered ±20%.
	cur, _ := db.Collection("runs").Find(dentest.Context(t), bson.D{{Key: "task_id", Value: id}}, options.Find().SetSort(bson.D{{Key: "attempt", Value: 1}}))
	var starts []time.Time
	for cur.Next(dentest.Context(t)) {
		starts = append(starts, cur.Current.Lookup("started").Time())
	}
	if len(starts) != 3 {
		t.Fatalf("%d runs, want 3", len(starts))
	}
	for i, minWait := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond} {
		ended := h[i].Document().Lookup("ended").Time()
		if gap := starts[i+1].Sub(ended); gap < minWait {
			t.Errorf("retry %d started %s after the failure, want at least %s", i+1, gap, minWait)
		}
	}
	if raw.Lookup("start_after").Type != bson.TypeDateTime {
		t.Errorf("start_after %s", raw.Lookup("start_after").Type)
	}
}

// A task scheduled with start_after in the future is not claimed before.
func TestStartAfter(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	due := time.Now().Add(2 * time.Second)
	db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "start_after", Value: due}}}})
	startNode(t, db, "n")
	waitFor(t, db, ids[1], 1)
	if time.Now().Before(due) && status(t, db, ids[0]) != -2 {
		t.Fatal("claimed before start_after")
	}
	waitFor(t, db, ids[0], 1)
	started, _ := db.Collection("runs").FindOne(dentest.Context(t), bson.D{{Key: "task_id", Value: ids[0]}}).Raw()
	if s := started.Lookup("started").Time(); s.Before(due) {
		t.Fatalf("started at %s, before start_after %s", s, due)
	}
}

// A runner field written by hand (pid 1, or the pid of a process that is
// not this task's runner) never makes the node signal anything.
func TestForgedRunnerIsNeverSignalled(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 0, "fifo")
	victim := exec.Command("sleep", "30")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group leader, like a runner
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	p, _ := process.NewProcess(int32(victim.Process.Pid))
	started, _ := p.CreateTime()
	host, _ := os.Hostname()
	for _, pid := range []int{1, victim.Process.Pid} {
		db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "queue", Value: qid}, {Key: "node", Value: "n"}, {Key: "status", Value: 0},
			{Key: "cancel", Value: true}, {Key: "parameters", Value: bson.D{}},
			{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: pid}, {Key: "started", Value: started}, {Key: "host", Value: host}}}})
	}
	startNode(t, db, "n", func(c *den.Config) { c.MaxTermination = 100 * time.Millisecond })
	// The node records -5 for both after the grace time, without signalling.
	dentest.Eventually(t, time.Minute, "cancels recorded", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -5}}) == 2
	})
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process named by a forged runner field was signalled: %v", err)
	}
}

// A node that stopped writing its document while its runner still works
// (systemctl stop with KillMode=process): the runner's heartbeat keeps its
// task from being rescued and run twice.
func TestStoppedNodesBeatingRunnerIsLeftAlone(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "Not::Here", 0, "fifo")
	db.Collection("nodes").InsertOne(ctx, bson.D{{Key: "node", Value: "stopped"}, {Key: "timestamp", Value: time.Now().Add(-time.Hour)}})
	id := bson.NewObjectID()
	db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "node", Value: "stopped"}, {Key: "status", Value: 0},
		{Key: "parameters", Value: bson.D{}}, {Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 4242}, {Key: "host", Value: "elsewhere"}, {Key: "beat", Value: time.Now()}}}})
	n := startNode(t, db, "live", func(c *den.Config) { c.DeadNodeAfter = time.Minute })
	time.Sleep(time.Second) // several rescue passes
	if st := status(t, db, id); st != 0 {
		t.Fatalf("a task whose runner beats was rescued: status %d", st)
	}
	if c := n.logs.FilterMessage("rescued the tasks of a dead node").Len(); c != 0 {
		t.Fatalf("rescue logged %d times", c)
	}
}
