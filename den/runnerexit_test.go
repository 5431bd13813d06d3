package den_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// These tests are runners that outlive what they need: their node and
// their database (a host whose node and MongoDB stop together, or a
// database gone for good). Before, such a runner retried its final
// writes for ever: a supervisor and a worker per task stayed, idle, and
// SIGTERM did not end them.

// giveUpMessage is the one line a runner logs when it exits without
// recording its run.
const giveUpMessage = "task runner gives up"

// runnerOf returns the processes of the runner that runs task id: its
// supervisor (the pid the task records) first, then the supervisor's
// children (its worker).
func runnerOf(t *testing.T, db *mongo.Database, id bson.ObjectID) []proc {
	t.Helper()
	var pid int64
	dentest.Eventually(t, time.Minute, "the task records its runner", func() bool {
		pid, _ = dentest.Task(t, db, id).Lookup("runner", "pid").AsInt64OK()
		return pid > 0
	})
	sup := proc{pid: int(pid)}
	if f := statFields(sup.pid); len(f) > 19 {
		sup.start = f[19]
	}
	out := []proc{sup}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 19 && f[1] == strconv.Itoa(sup.pid) {
			out = append(out, proc{pid: child, start: f[19]})
		}
	}
	if len(out) < 2 || !sup.alive() {
		t.Fatalf("runner of task %s: supervisor %d and its worker not found (%v)", id.Hex(), pid, out)
	}
	for _, p := range out {
		t.Cleanup(p.kill)
	}
	return out
}

// allGone reports whether none of procs runs.
func allGone(procs []proc) bool {
	for _, p := range procs {
		if p.alive() {
			return false
		}
	}
	return true
}

// logged returns the fields of each line of a runner log (the
// development console format: the fields are the line's last tab-separated
// JSON object) whose message contains msg.
func logged(t *testing.T, file, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("read the runners' log: %v", err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, msg) {
			continue
		}
		fields := map[string]any{}
		if i := strings.LastIndex(line, "\t{"); i >= 0 {
			if err := json.Unmarshal([]byte(line[i+1:]), &fields); err != nil {
				t.Errorf("log line %q: %v", line, err)
			}
		}
		out = append(out, fields)
	}
	return out
}

// duration reads a duration field of a log line ("23.5s").
func duration(t *testing.T, fields map[string]any, key string) time.Duration {
	t.Helper()
	s, _ := fields[key].(string)
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Errorf("log field %s is %v, not a duration", key, fields[key])
	}
	return d
}

// A node and its database stop together (the node is killed and every
// command is refused from then on) while the node's runner runs a
// program. The runner stops the run when its lease runs out, then gives
// up recording it once no write has landed for its bound (here 23.5 s: a
// 10 s dead_node_after), and exits with one line that says why: its
// supervisor, worker and program are all gone. When the database answers
// again, the restarted node rescues the task (its runner is gone), and its
// retry runs: nothing is lost. Before, the runner stayed, retrying.
func TestRunnerGivesUpWithoutNodeOrDatabase(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	p := dentest.Faults(t, 1)
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo")
	dir := t.TempDir()
	pidFile, mark := filepath.Join(dir, "pid"), filepath.Join(dir, "ran")
	id := dentest.TaskWith(t, d, qid, bson.D{{Key: "shell", Value: fmt.Sprintf(
		"if [ -e %[1]s ]; then echo again; exit 0; fi; touch %[1]s; echo $$ > %[2]s; exec sleep 600", mark, pidFile)}},
		bson.E{Key: "max_retries", Value: 1})
	runLog := filepath.Join(dir, "runners.log")
	node, _ := nodeProcess(t, d, "n", envNodeURI+"="+p.URI(), envNodeLease+"=10s", envNodeRunLog+"="+runLog)
	waitFile(t, pidFile)
	dentest.Eventually(t, time.Minute, "the program's pid written", func() bool { return len(readPids(t, pidFile)) == 1 })
	prog := readProcs(t, pidFile)[0]
	t.Cleanup(prog.kill)
	runner := runnerOf(t, d, id)

	p.Refuse(time.Hour)
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node.Wait()
	cut := time.Now()
	dentest.Eventually(t, 3*time.Minute, "the runner and its program gone", func() bool { return allGone(append(runner, prog)) })
	t.Logf("the runner exited %s after its node and database went", time.Since(cut).Round(100*time.Millisecond))
	lines := logged(t, runLog, giveUpMessage)
	if len(lines) != 1 {
		t.Fatalf("the runner logged %q %d times, want once", giveUpMessage, len(lines))
	}
	why, _ := lines[0]["reason"].(string)
	if !strings.Contains(why, "node") || !strings.Contains(why, "no write") {
		t.Errorf("the give-up line's reason %q says nothing of the node and the database", why)
	}
	// It never gives up before its bound: the lease has run out for any
	// rescuer by then.
	if since, bound := duration(t, lines[0], "since_last_write"), duration(t, lines[0], "give_up_after"); since < bound || bound < 10*time.Second {
		t.Errorf("gave up %s after its last write landed, bound %s", since, bound)
	}

	p.Refuse(0)
	startNode(t, d, "n", func(c *den.Config) { c.DeadNodeAfter = 10 * time.Second; c.MaxTermination = time.Second })
	raw := dentest.WaitStatus(t, d, id, 1)
	if o, _ := raw.Lookup("history", "0", "outcome").StringValueOK(); o != "runner_died" {
		t.Errorf("the first attempt's outcome is %q, want runner_died: %s", o, raw)
	}
}

// An operator stops a runner with SIGTERM (to its supervisor alone) while
// its node lives, its lease holds and the database refuses every command:
// the runner stops its program at once, as a cancel does, tries to record
// the run for StopRecordFor (30 s), then exits saying so. When the
// database answers again, its node rescues the task. Before, the runner
// stopped the program and then retried its writes for ever.
//
// The same with the runner's worker stopped (SIGSTOP), as a worker hung in
// the kernel is: the supervisor kills it once it has had the time to stop,
// stops the program, and exits.
func TestSIGTERMStopsARunnerWhileTheDatabaseIsGone(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	p := dentest.Faults(t, 1)
	qid := dentest.Queue(t, d, "cmd", command.Name, 2, "fifo")
	dir := t.TempDir()
	var ids []bson.ObjectID
	var pidFiles []string
	for i := range 2 {
		pidFiles = append(pidFiles, filepath.Join(dir, fmt.Sprintf("pid%d", i)))
		ids = append(ids, dentest.TaskWith(t, d, qid, bson.D{{Key: "shell", Value: "echo $$ > " + pidFiles[i] + "; exec sleep 600"}}))
	}
	runLog := filepath.Join(dir, "runners.log")
	startNode(t, p.Client(t).Database(d.Name()), "n", func(c *den.Config) {
		c.URI = p.URI()
		c.DeadNodeAfter = time.Minute
		c.MaxTermination = time.Second
		c.Runner.Log = runLog
	})
	var progs []proc
	var runners [][]proc
	for i, id := range ids {
		waitFile(t, pidFiles[i])
		dentest.Eventually(t, time.Minute, "the program's pid written", func() bool { return len(readPids(t, pidFiles[i])) == 1 })
		progs = append(progs, readProcs(t, pidFiles[i])[0])
		t.Cleanup(progs[i].kill)
		runners = append(runners, runnerOf(t, d, id))
	}
	p.Refuse(time.Hour)
	// The second runner's worker cannot act on anything.
	if err := syscall.Kill(runners[1][1].pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for _, r := range runners {
		if err := syscall.Kill(r[0].pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	dentest.Eventually(t, 30*time.Second, "the first program stopped", func() bool { return !progs[0].alive() })
	for i, r := range runners {
		dentest.Eventually(t, 3*time.Minute, fmt.Sprintf("runner %d and its program gone", i), func() bool { return allGone(append(r, progs[i])) })
		t.Logf("runner %d exited %s after SIGTERM", i, time.Since(sent).Round(100*time.Millisecond))
	}
	lines := logged(t, runLog, giveUpMessage)
	if len(lines) != 1 {
		t.Fatalf("the runners logged %q %d times, want once (the first; the second's worker was stopped)", giveUpMessage, len(lines))
	}
	if why, _ := lines[0]["reason"].(string); !strings.Contains(why, "signal") {
		t.Errorf("the give-up line's reason %q does not say the runner was stopped by a signal", why)
	}
	if n := len(logged(t, runLog, "did not stop in time")); n != 1 {
		t.Errorf("the supervisor of the stopped worker said %d times that it killed it, want once", n)
	}

	p.Refuse(0)
	for _, id := range ids {
		raw := dentest.WaitStatus(t, d, id, -6)
		if o, _ := raw.Lookup("outcome").StringValueOK(); o != "runner_died" {
			t.Errorf("task %s: outcome %q, want runner_died: %s", id.Hex(), o, raw)
		}
	}
}

// A node that has stopped lets go of the runners still running: one that
// dies afterwards is reaped, and the stopped node neither writes its task
// nor logs (a later node's rescue deals with it). Before, the watcher of
// such a runner put the task back and logged through the logger of a node
// whose Run had returned (in tests, after the test had ended: a panic).
func TestStoppedNodeLetsGoOfItsRunners(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	id := dentest.Tasks(t, db, qid, sleepTasks(1, 120_000)...)[0]
	var sig den.TestSignals
	sig.Init()
	node := startNode(t, db, "n", func(c *den.Config) { c.Signals = &sig })
	dentest.WaitStatus(t, db, id, 0)
	procs := runnerOf(t, db, id)
	node.Stop()
	logged := node.Logs.Len()
	before := dentest.Task(t, db, id)
	for _, p := range procs {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	// The supervisor is the node's child: its watcher reaps it, does what
	// it would do (a write, a log line), and then says so.
	sig.RunnerExited.WaitFor(t, "the runner's watcher done", func(pid int) bool { return pid == procs[0].pid })
	if f := statFields(procs[0].pid); len(f) > 19 && f[19] == procs[0].start {
		t.Errorf("the runner's watcher was done before the runner was reaped: %v", f)
	}
	if n := node.Logs.Len(); n != logged {
		t.Errorf("the stopped node logged %d lines after its Run returned: %v", n-logged, node.Logs.All()[logged:])
	}
	after := dentest.Task(t, db, id)
	for _, k := range []string{"status", "node", "mtime"} {
		if b, a := before.Lookup(k), after.Lookup(k); !b.Equal(a) {
			t.Errorf("the stopped node changed its task's %s: %v, then %v", k, b, a)
		}
	}
}
