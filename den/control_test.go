package den_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

func status(t *testing.T, db *mongo.Database, id bson.ObjectID) int64 {
	st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK()
	return st
}

func cancel(t *testing.T, db *mongo.Database, id bson.ObjectID) {
	t.Helper()
	// Exactly what the README tells users to type.
	_, err := db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: true}}}})
	if err != nil {
		t.Fatal(err)
	}
}

// runnerPID returns the pid a running task's runner recorded. It never
// returns 0 or less: syscall.Kill(0, ...) would signal the test itself.
func runnerPID(t *testing.T, db *mongo.Database, id bson.ObjectID) int {
	t.Helper()
	pid, _ := dentest.Task(t, db, id).Lookup("runner", "pid").AsInt64OK()
	if pid <= 1 {
		t.Fatalf("task %s records runner pid %d", id.Hex(), pid)
	}
	return int(pid)
}

// kill sends sig to pid and fails the test if it cannot.
func kill(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill %d with %v: %v", pid, sig, err)
	}
}

func TestCancelQueuedTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	cancel(t, db, ids[0])
	startNode(t, db, "n")
	dentest.WaitStatus(t, db, ids[1], 1)
	raw := dentest.WaitStatus(t, db, ids[0], -5)
	if n := dentest.Count(t, db.Collection("runs"), bson.D{{Key: "task_id", Value: ids[0]}}); n != 0 {
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
	ready := filepath.Join(t.TempDir(), "ready")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: `trap "" TERM; echo started; touch ` + ready + `; while true; do sleep 1; done`}})[0]
	startNode(t, db, "n")
	dentest.WaitStatus(t, db, id, 0)
	dentest.Eventually(t, time.Minute, "the program printed", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	pid := runnerPID(t, db, id)
	sent := time.Now()
	cancel(t, db, id)
	raw := dentest.WaitStatus(t, db, id, -5)
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
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[1]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 1}, {Key: "retry_delay", Value: 1}}}})
	startNode(t, db, "n")
	dentest.WaitStatus(t, db, ids[0], 0)
	dentest.WaitStatus(t, db, ids[1], 0)
	kill(t, runnerPID(t, db, ids[0]), syscall.SIGKILL)
	raw := dentest.WaitStatus(t, db, ids[0], -6)
	// The node's watch of its child ("died") or its periodic check ("is
	// gone"), whichever sees it first.
	if reason := raw.Lookup("orphan_reason").StringValue(); !strings.Contains(reason, "died") && !strings.Contains(reason, "is gone") {
		t.Errorf("orphan_reason %s", raw.Lookup("orphan_reason"))
	}
	if o := raw.Lookup("outcome").StringValue(); o != queue.OutcomeRunnerDied {
		t.Errorf("outcome %q, want runner_died", o)
	}
	// The second one had a retry left: it is run again and succeeds.
	kill(t, runnerPID(t, db, ids[1]), syscall.SIGKILL)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[1]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "parameters.ms", Value: 0}}}})
	raw = dentest.WaitStatus(t, db, ids[1], 1)
	if a, _ := raw.Lookup("attempts").AsInt64OK(); a != 1 {
		t.Errorf("attempts %d, want 1", a)
	}
	h, _ := raw.Lookup("history").Array().Values()
	if len(h) != 1 || h[0].Document().Lookup("status").AsInt64() != -6 || h[0].Document().Lookup("outcome").StringValue() != queue.OutcomeRunnerDied {
		t.Errorf("history %v", h)
	}
}

// The node is SIGKILLed; one of its runners is then killed too. The
// restarted node leaves the live runner alone and rescues the dead one.
func TestRestartedNodeRescuesOnlyDeadRunners(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	// Killed only once both runs sleep with no command in flight: one the
	// node was relaying when it died fails (its outcome is unknown).
	ready := t.TempDir()
	params := sleepTasks(2, 4000)
	for i := range params {
		params[i] = append(params[i], bson.E{Key: "ready", Value: ready})
	}
	ids := dentest.Tasks(t, db, qid, params...)
	node, _ := nodeProcess(t, db, "phoenix")
	dentest.WaitStatus(t, db, ids[0], 0)
	dentest.WaitStatus(t, db, ids[1], 0)
	dentest.Eventually(t, 2*time.Minute, "both runs sleeping", func() bool {
		entries, _ := os.ReadDir(ready)
		return len(entries) == 2
	})
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node.Wait()
	kill(t, runnerPID(t, db, ids[0]), syscall.SIGKILL)
	nodeProcess(t, db, "phoenix")
	dentest.WaitStatus(t, db, ids[0], -6)
	dentest.WaitStatus(t, db, ids[1], 1)
	if n := dentest.Count(t, db.Collection("runs"), bson.D{{Key: "task_id", Value: ids[1]}}); n != 1 {
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
	qid := dentest.Queue(t, db, "unserved", "Not::Here", 0, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 3600})
	old := time.Now().Add(-time.Hour)
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "ghost"}, {Key: "timestamp", Value: old}})
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
		dentest.Insert(t, db.Collection("tasks"), doc)
	}
	var rescueEvery time.Duration
	fast := func(c *den.Config) { c.DeadNodeAfter = time.Minute; rescueEvery = c.RescueEvery }
	nodes := []nodetest.Node{startNode(t, db, "live1", fast), startNode(t, db, "live2", fast), startNode(t, db, "live3", fast)}
	dentest.Eventually(t, time.Minute, "ghost's tasks rescued", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "node", Value: "ghost"}}) == 2 // the two orphaned keep node ghost
	})
	// Two more rescue passes of every node: nothing is rescued twice.
	waitPasses(t, db, []string{"live1", "live2", "live3"}, 2, rescueEvery)
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
		for _, e := range n.Logs.FilterMessage("rescued the tasks of a dead or unknown node").All() {
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
	raw := dentest.WaitStatus(t, db, id, 1)
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
	cur, err := db.Collection("runs").Find(dentest.Context(t), bson.D{{Key: "task_id", Value: id}}, options.Find().SetSort(bson.D{{Key: "attempt", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for cur.Next(dentest.Context(t)) {
		starts = append(starts, cur.Current.Lookup("started").Time())
	}
	if err := cur.Err(); err != nil || len(starts) != 3 {
		t.Fatalf("%d runs (%v), want 3", len(starts), err)
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
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "start_after", Value: due}}}})
	startNode(t, db, "n")
	dentest.WaitStatus(t, db, ids[1], 1)
	if time.Now().Before(due) && status(t, db, ids[0]) != -2 {
		t.Fatal("claimed before start_after")
	}
	dentest.WaitStatus(t, db, ids[0], 1)
	started, err := db.Collection("runs").FindOne(dentest.Context(t), bson.D{{Key: "task_id", Value: ids[0]}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if s := started.Lookup("started").Time(); s.Before(due) {
		t.Fatalf("started at %s, before start_after %s", s, due)
	}
}

// A runner field written by hand (pid 1, or the pid of a process that is
// not this task's runner) never makes the node signal anything.
func TestForgedRunnerIsNeverSignalled(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 0, "fifo")
	// Killed at cleanup; long enough for a slow node start.
	victim, started, exited := dentest.GroupLeader(t)
	host, _ := os.Hostname()
	for _, pid := range []int{1, victim.Process.Pid} {
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}, {Key: "node", Value: "n"}, {Key: "status", Value: 0},
			{Key: "cancel", Value: true}, {Key: "parameters", Value: bson.D{}},
			{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: pid}, {Key: "started", Value: started}, {Key: "host", Value: host}}}})
	}
	startNode(t, db, "n", func(c *den.Config) { c.MaxTermination = 100 * time.Millisecond })
	// The node records -5 for both after the grace time, without signalling.
	dentest.Eventually(t, time.Minute, "cancels recorded", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -5}}) == 2
	})
	select {
	case <-exited:
		t.Fatalf("the process named by a forged runner field was signalled: %v", victim.ProcessState)
	default:
	}
	if !liveProcess(victim.Process.Pid) {
		t.Fatal("the process named by a forged runner field is not running")
	}
}

// A node that stopped writing its document while its runner still works
// (systemctl stop with KillMode=process): the runner's heartbeat keeps its
// task from being rescued and run twice, pass after pass, while the same
// node's task whose runner stopped beating is rescued (which shows that
// the passes did look at the dead node's tasks).
func TestStoppedNodesBeatingRunnerIsLeftAlone(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Not::Here", 0, "fifo")
	long := time.Now().Add(-time.Hour)
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "stopped"}, {Key: "timestamp", Value: long}})
	beating, silent := bson.NewObjectID(), bson.NewObjectID()
	for id, beat := range map[bson.ObjectID]time.Time{beating: time.Now(), silent: long} {
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "node", Value: "stopped"}, {Key: "status", Value: 0},
			{Key: "parameters", Value: bson.D{}}, {Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 4242}, {Key: "host", Value: "elsewhere"}, {Key: "beat", Value: beat}}}})
	}
	// A reused runner, started an hour ago, that began this run just now
	// and has not beaten yet: its run's start is its sign of life, not its
	// process's.
	reused := bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: reused}, {Key: "queue", Value: qid}, {Key: "node", Value: "stopped"}, {Key: "status", Value: 0},
		{Key: "parameters", Value: bson.D{}}, {Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 4243}, {Key: "started", Value: long.UnixMilli()}, {Key: "host", Value: "elsewhere"}, {Key: "at", Value: time.Now()}}}})
	var rescueEvery time.Duration
	n := startNode(t, db, "live", func(c *den.Config) { c.DeadNodeAfter = time.Minute; rescueEvery = c.RescueEvery })
	dentest.WaitStatus(t, db, silent, -6)
	waitPasses(t, db, []string{"live"}, 2, rescueEvery)
	if st := status(t, db, beating); st != 0 {
		t.Fatalf("a task whose runner beats was rescued: status %d", st)
	}
	if st := status(t, db, reused); st != 0 {
		t.Fatalf("a task a reused runner has just started was rescued: status %d", st)
	}
	logged := n.Logs.FilterMessage("rescued the tasks of a dead or unknown node").All()
	if len(logged) != 1 || logged[0].ContextMap()["orphaned"] != int64(1) {
		t.Fatalf("rescues logged: %v, want one line for the silent runner's task", logged)
	}
}

// A node with DrainOnStop (den dev, whose database stops with it) waits for
// its runners when it stops: a short task finishes, a long one is stopped
// and records that, before Run returns.
func TestDrainOnStopWaitsForRunners(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	ids := dentest.Tasks(t, db, qid, sleepTasks(1, 1500)[0], sleepTasks(1, 600000)[0])
	// A runner of another queue that is idle when the node stops.
	quick := dentest.Tasks(t, db, dentest.Queue(t, db, "quick", sleepPlugin, 1, "fifo"), sleepTasks(1, 1)[0])[0]
	node := startNode(t, db, "n", func(c *den.Config) { c.DrainOnStop = 3 * time.Second })
	dentest.WaitStatus(t, db, ids[0], 0)
	dentest.WaitStatus(t, db, ids[1], 0)
	idle, _ := runOf(t, "quick task", dentest.WaitStatus(t, db, quick, 1))
	node.Stop()
	// Every runner of the node is gone once it has stopped: the busy ones
	// drained, the idle one retired.
	for _, id := range append(ids, quick) {
		pid, _ := runOf(t, "task", dentest.Task(t, db, id))
		if liveProcess(pid) {
			t.Errorf("runner %d of task %s still runs after the node drained (the idle one is %d)", pid, id.Hex(), idle)
		}
	}
	if st := status(t, db, ids[0]); st != 1 {
		t.Errorf("short task: status %d when the node had stopped, want 1", st)
	}
	raw := dentest.Task(t, db, ids[1])
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !strings.Contains(raw.Lookup("stderr").StringValue(), "stopped by a signal") {
		t.Errorf("long task when the node had stopped: %s", raw)
	}
}

// A runner this node process started is alive as long as the node has not
// reaped it: its recorded start time is not compared again. (The start
// time a process appears to have can move by a second or more, with the
// boot time the kernel reports or a clock step, and a reused runner lives
// for many tasks.) Here the recorded start is off by 1.5 s: the task is
// left to its runner, and the runner to its task.
func TestOwnRunnerIsNotJudgedByItsStartTime(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	id := dentest.Tasks(t, db, qid, sleepTasks(1, 600000)...)[0]
	var rescueEvery time.Duration
	startNode(t, db, "n", func(c *den.Config) { rescueEvery = c.RescueEvery })
	dentest.WaitStatus(t, db, id, 0)
	r := runnerInfo(t, dentest.Task(t, db, id))
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "runner.started", Value: 1500}}}})
	waitPasses(t, db, []string{"n"}, 3, rescueEvery)
	if st := status(t, db, id); st != 0 {
		t.Fatalf("the task of a healthy runner whose recorded start is off by 1.5 s has status %d, want 0 (running)", st)
	}
	if !liveProcess(r.PID) {
		t.Fatalf("the healthy runner %d was killed", r.PID)
	}
	cancel(t, db, id)
	dentest.WaitStatus(t, db, id, -5)
}
