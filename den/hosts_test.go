package den_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// These tests run two nodes as two hosts: node a is a process of this
// host, node b a process in UTS, PID and mount namespaces of its own with
// another hostname. To den, b is then another machine: it cannot see or
// signal a's runners (its /proc shows its own processes only), so a task
// of a's is safe from a second attempt only by the runner's lease, as on
// two machines. Node a is frozen with SIGSTOP: its runners, which reach
// the database through a's relay, are cut off with it.

// hostProcess starts this test binary as node name on a host of its own,
// named host. It skips the test, saying why, where the kernel refuses the
// namespaces.
func hostProcess(t *testing.T, db *mongo.Database, name, host string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	cmd, out := nodeProcessWith(t, db, name, attr, append(extraEnv, envNodeHost+"="+host)...)
	if !out.Scan() {
		t.Fatalf("node %s on host %s said nothing: %v", name, host, cmd.Wait())
	}
	if line := out.Text(); line != "host "+host {
		t.Skipf("node %s could not become host %s in its namespaces, so this machine cannot run a second host: %s", name, host, line)
	}
	go func() { // the rest of its stdout, so that it never blocks
		for out.Scan() {
		}
	}()
	return cmd
}

// freeze stops node process n with SIGSTOP until the test ends (or thaw).
func freeze(t *testing.T, n *exec.Cmd) (thaw func()) {
	t.Helper()
	if err := n.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thaw = func() { n.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(thaw)
	return thaw
}

// uptime is the host's time since boot (/proc/uptime, CLOCK_BOOTTIME), in
// seconds: the clock the task programs stamp with, the same on both hosts
// (namespaces do not change it).
func uptime(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Fatalf("/proc/uptime: %q", b)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stampProgram is a shell program that stamps each of its steps into file
// as a line "<step> <run marker> <pid> <uptime> <epoch seconds>": start,
// a tick every 0.2 s while it runs, stop when it gets SIGTERM, end when it
// ends. The first attempt (file still empty) ticks ticks times (60 s for
// 300), a later one 5 times. With stubborn, it ticks on after SIGTERM,
// until SIGKILL.
func stampProgram(file string, ticks int, stubborn ...bool) string {
	onTerm := "st stop; exit 143"
	if len(stubborn) > 0 && stubborn[0] {
		onTerm = "st stop"
	}
	return fmt.Sprintf(`f=%s
st() { read up rest < /proc/uptime; echo "$1 $DEN_RUN $$ $up $(date +%%s.%%N)" >> $f; }
if [ -s $f ]; then n=5; else n=%d; fi
st start
trap '`+onTerm+`' TERM
i=0; while [ $i -lt $n ]; do st tick; sleep 0.2; i=$((i+1)); done
st end`, file, ticks)
}

// attempt is what one run of stampProgram stamped.
type attempt struct {
	run        string  // its run marker (DEN_RUN: task id and run token)
	start      float64 // uptime at its start
	last       float64 // uptime of its last stamp
	stop, end  bool    // it stamped stop (SIGTERM) or end (ran to its end)
	stopAt     float64 // uptime of its stop stamp
	stampLines int
}

// attempts reads file's stamps, one attempt per run marker, in the order
// they started.
func attempts(t *testing.T, file string) []attempt {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	// Only whole lines: the program may be writing one now (or have
	// made the file and written nothing yet).
	whole := string(b[:bytes.LastIndexByte(b, '\n')+1])
	var out []attempt
	for _, line := range strings.Split(strings.TrimSpace(whole), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 { // the epoch seconds are missing when SIGTERM stopped date
			t.Fatalf("stamp %q", line)
		}
		up, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			t.Fatalf("stamp %q: %v", line, err)
		}
		i := slices.IndexFunc(out, func(a attempt) bool { return a.run == f[1] })
		if i < 0 {
			out = append(out, attempt{run: f[1], start: up})
			i = len(out) - 1
		}
		a := &out[i]
		a.last, a.stampLines = max(a.last, up), a.stampLines+1
		switch f[0] {
		case "stop":
			a.stop, a.stopAt = true, up
		case "end":
			a.end = true
		}
	}
	return out
}

// waitTicking waits until the task's first attempt, on node a, has
// stamped its start and a tick. An attempt that failed before (the test
// would take the retry for it) fails the test, saying why.
func waitTicking(t *testing.T, d *mongo.Database, id bson.ObjectID, stamps string) {
	t.Helper()
	dentest.Eventually(t, time.Minute, "attempt 1 ticks on node a", func() bool {
		at := attempts(t, stamps)
		return len(at) == 1 && at[0].stampLines >= 2
	})
	if raw := dentest.Task(t, d, id); raw.Lookup("history").Type != 0 {
		t.Fatalf("the task's first attempt failed before the test began: %s; its stderr: %q", raw, historyStderr(t, d, raw))
	}
}

// historyStderr is what the first attempt in task raw's history wrote to
// stderr, to explain a failure.
func historyStderr(t *testing.T, d *mongo.Database, raw bson.Raw) string {
	id, ok := raw.Lookup("history", "0", "stderr").ObjectIDOK()
	if !ok {
		s, _ := raw.Lookup("history", "0", "stderr").StringValueOK()
		return s
	}
	b, err := gridfs.NewBucket(d, queue.GridFSPrefix).ReadFile(dentest.Context(t), id)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// secs is a duration in seconds, as uptimes are.
func secs(d time.Duration) float64 { return d.Seconds() }

// The lease of the tests here: dead_node_after 10 s, so runners beat every
// 1.25 s (queue.BeatEvery) and a cut-off runner stops its run after 5 s
// without a beat landing (stopAfter: at least half the lease); a task's
// grace is 1 s.
var hostBeat = queue.BeatEvery(hostLease)

const (
	hostLease = 10 * time.Second
	hostStop  = hostLease / 2
	hostGrace = time.Second
)

// rescuedByOtherHost runs a 60-second task on node a, freezes a (and so
// its runners) and lets node b, on another host whose clock is off by
// bSkew, rescue it, and checks from the program's stamps that the two
// attempts never overlapped. With a grace (the queue's
// max_termination_time), the program ignores SIGTERM and ticks on until
// SIGKILL.
func rescuedByOtherHost(t *testing.T, bSkew, grace time.Duration) {
	d := dentest.DB(t)
	stubborn := grace > 0
	if !stubborn {
		grace = hostGrace
	}
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0},
		bson.E{Key: "max_termination_time", Value: grace.Seconds()})
	stamps := filepath.Join(t.TempDir(), "stamps")
	id := dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: stampProgram(stamps, 300, stubborn)}})[0]
	lease := envNodeLease + "=" + hostLease.String()
	a, _ := nodeProcess(t, d, "a", lease)
	waitTicking(t, d, id, stamps)
	hostProcess(t, d, "b", "den-test-b", lease, envNodeClock+"="+bSkew.String())
	thaw := freeze(t, a)
	frozen := uptime(t)
	raw := dentest.WaitStatus(t, d, id, 1)
	took := uptime(t) - frozen
	at := attempts(t, stamps)
	if len(at) != 2 {
		t.Fatalf("%d attempts stamped, want 2: %+v", len(at), at)
	}
	first, second := at[0], at[1]
	if !first.stop || first.end {
		t.Errorf("attempt 1 was not stopped with SIGTERM part way (stop %v, end %v)", first.stop, first.end)
	}
	// A node may start the task again only once attempt 1's processes
	// are surely gone: dead_node_after after its last beat, or, where
	// the grace does not fit in the lease, the time its runner takes to
	// stop it (half the lease, two beats, the grace) and 5 s.
	heldFor := max(hostLease, hostStop+2*hostBeat+grace+5*time.Second)
	if !second.end || second.stop {
		t.Errorf("attempt 2 did not run to its end (stop %v, end %v)", second.stop, second.end)
	}
	// The guarantee: attempt 1's program had stopped (its last stamp,
	// the one its SIGTERM trap wrote) before attempt 2's started.
	if first.last >= second.start {
		t.Errorf("the attempts overlapped: attempt 1's last stamp %.2f s after its node froze, attempt 2 started %.2f s after", first.last-frozen, second.start-frozen)
	}
	// Attempt 1 stopped once its lease ran out: no later than stopAfter
	// plus the beat that finds it out and the grace, from its last beat
	// that landed (at most a beat before the freeze).
	if limit := secs(hostBeat + hostStop + hostBeat + time.Second); first.stopAt-frozen > limit {
		t.Errorf("attempt 1 stopped %.2f s after its node froze, later than its lease allows (%.0f s)", first.stopAt-frozen, limit)
	}
	// Attempt 2 starts no earlier than that after attempt 1's last beat
	// (at most a beat before the freeze).
	if second.start-frozen < secs(heldFor-hostBeat) {
		t.Errorf("attempt 2 started %.2f s after node a froze, before its runner's lease (%s) could have run out", second.start-frozen, heldFor)
	}
	// And not for something much longer (orphan_age, an hour here): the
	// rescue round (rescue_every, 0.2 s here), a claim and a runner's
	// start take a few seconds under -race, and tens of seconds on a
	// machine loaded twice over, which is what the minute's slack is for;
	// the time it takes is measured by BenchmarkRecovery, not here.
	if second.start-frozen > secs(heldFor+time.Minute) {
		t.Errorf("attempt 2 started %.2f s after node a froze, long after its runner's lease (%s)", second.start-frozen, heldFor)
	}
	t.Logf("node a frozen; attempt 1 got SIGTERM after %.2f s, its last stamp after %.2f s, attempt 2 started after %.2f s (dead_node_after %s, grace %s), the task succeeded after %.2f s",
		first.stopAt-frozen, first.last-frozen, second.start-frozen, hostLease, grace, took)
	if raw.Lookup("node").StringValue() != "b" || raw.Lookup("runner", "host").StringValue() != "den-test-b" {
		t.Errorf("the task ended on node %s, runner host %s, want b on den-test-b", raw.Lookup("node"), raw.Lookup("runner", "host"))
	}
	h, _ := raw.Lookup("history").Array().Values()
	if n, _ := raw.Lookup("attempts").AsInt64OK(); n != 1 || len(h) != 1 {
		t.Fatalf("attempts %d, history of %d, want 1 and 1: %s; the first attempt's stderr: %q", n, len(h), raw, historyStderr(t, d, raw))
	}
	e := h[0].Document()
	if e.Lookup("attempt").AsInt64() != 1 || e.Lookup("node").StringValue() != "a" || e.Lookup("outcome").StringValue() != queue.OutcomeNodeDied {
		t.Errorf("history: %s", e)
	}
	if runs := []string{first.run, second.run}; !strings.HasPrefix(runs[0], id.Hex()+".") || !strings.HasPrefix(runs[1], id.Hex()+".") {
		t.Errorf("run markers %v are not the task's", runs)
	}
	// Node a thawed: its runner, whose run is over, writes nothing over
	// the task node b ended.
	thaw()
	waitPasses(t, d, []string{"a"}, 2, 0)
	again := dentest.Task(t, d, id)
	if again.Lookup("status").AsInt64() != 1 || again.Lookup("node").StringValue() != "b" || len(again.Lookup("history").Array()) != len(raw.Lookup("history").Array()) {
		t.Errorf("node a's runner wrote over the task after its node thawed: %s", again)
	}
}

// A task whose node froze (SIGSTOP: node and runners cut off) is run
// again by a node on another host once dead_node_after has passed, and
// its first attempt's program stopped before the second started.
func TestTwoHostsFrozenNodeRescued(t *testing.T) {
	t.Parallel()
	rescuedByOtherHost(t, 0, 0)
}

// The same with the rescuing host's clock two minutes ahead, more than
// dead_node_after: it agrees with the frozen node's runner on when the
// lease ran out (both write and decide by the database server's clock).
func TestTwoHostsClocksApartRescued(t *testing.T) {
	t.Parallel()
	rescuedByOtherHost(t, 2*time.Minute, 0)
}

// The same with a grace (max_termination_time, 8 s) too long for the
// lease to hold it: the runner stops the run after half the lease (5 s),
// and the program, which ignores SIGTERM, lives until SIGKILL 8 s later.
// The other host waits for that, not just dead_node_after. Before, it
// started attempt 2 after dead_node_after, while attempt 1 still ran.
func TestTwoHostsLongGraceRescued(t *testing.T) {
	t.Parallel()
	rescuedByOtherHost(t, 0, 8*time.Second)
}

// With dead_node_after 1m and every other timer at its default (the
// rescues every 30 s, the probe every pass), a task whose node froze
// (SIGSTOP: node and runners cut off) runs again on another host within
// 75 s of the freeze, its first attempt stopped first by its own runner,
// as the lease says. The rescues run as soon as the frozen node has been
// silent for dead_node_after, not at their next round up to 30 s later,
// and the rescuing node claims the task it put back at once, not when a
// probe finds it: before, attempt 2 started 90 to 105 s after the freeze.
func TestFrozenNodeTaskRunsAgainSoon(t *testing.T) {
	t.Parallel()
	const lease, within = time.Minute, 75 * time.Second
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0},
		bson.E{Key: "max_termination_time", Value: hostGrace.Seconds()})
	stamps := filepath.Join(t.TempDir(), "stamps")
	id := dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: stampProgram(stamps, 1000)}})[0]
	env := []string{envNodeLease + "=" + lease.String(), envNodeDefaults + "=1"}
	a, _ := nodeProcess(t, d, "a", env...)
	waitTicking(t, d, id, stamps)
	hostProcess(t, d, "b", "den-test-b", env...)
	waitPasses(t, d, []string{"b"}, 2, 0)
	freeze(t, a)
	frozen := uptime(t)
	var at []attempt
	dentest.Eventually(t, 2*time.Minute, "attempt 2 starts on node b", func() bool {
		at = attempts(t, stamps)
		return len(at) >= 2
	})
	first, second := at[0], at[1]
	if !first.stop {
		t.Errorf("attempt 1 was not stopped with SIGTERM before attempt 2 started")
	}
	if first.last >= second.start {
		t.Errorf("the attempts overlapped: attempt 1's last stamp %.2f s after its node froze, attempt 2 started %.2f s after", first.last-frozen, second.start-frozen)
	}
	if second.start-frozen < secs(lease-queue.BeatEvery(lease)) {
		t.Errorf("attempt 2 started %.2f s after node a froze, before dead_node_after (%s) could have passed", second.start-frozen, lease)
	}
	if second.start-frozen > secs(within) {
		t.Errorf("attempt 2 started %.2f s after node a froze; want within %s", second.start-frozen, within)
	}
	t.Logf("node a frozen; attempt 1 got SIGTERM after %.2f s, attempt 2 started on node b after %.2f s (dead_node_after %s)",
		first.stopAt-frozen, second.start-frozen, lease)
	raw := dentest.WaitStatus(t, d, id, 1)
	if raw.Lookup("node").StringValue() != "b" {
		t.Errorf("the task ended on node %s, want b", raw.Lookup("node"))
	}
}

// A task cancelled while its node is frozen and its runner cut off from
// the database (the runner connects itself, runner.relay: false, through a
// proxy that refuses every command) is stopped by its runner: within a
// beat or two of the database answering again when that comes first,
// else when its lease runs out; it ends cancelled (-5) and is not run
// again, though its queue allows a retry and another host's node is up.
func TestTwoHostsCancelWhileCutOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		lease, outage time.Duration
	}{
		// lease 20 s: beats every 4 s, the run stops after 10 s without
		// one; the database is back after 4 s.
		{"database back first", 20 * time.Second, 4 * time.Second},
		// lease 10 s: beats every 2 s, the run stops after 5 s without
		// one; the database is back after 20 s.
		{"lease runs out first", 10 * time.Second, 20 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			beat, stopAfter := c.lease/5, c.lease/2
			d := dentest.DB(t)
			p := dentest.Faults(t, 1)
			qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0})
			stamps := filepath.Join(t.TempDir(), "stamps")
			id := dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: stampProgram(stamps, 300)}})[0]
			lease := envNodeLease + "=" + c.lease.String()
			a, _ := nodeProcess(t, d, "a", envNodeURI+"="+p.URI(), envNodeDirect+"=1", lease)
			waitTicking(t, d, id, stamps)
			hostProcess(t, d, "b", "den-test-b", lease)
			freeze(t, a)
			p.Refuse(c.outage)
			cut := uptime(t)
			back := cut + secs(c.outage)
			cancel(t, d, id)
			raw := dentest.WaitStatus(t, d, id, -5)
			at := attempts(t, stamps)
			if len(at) != 1 || !at[0].stop || at[0].end {
				t.Fatalf("want one attempt, stopped with SIGTERM part way: %+v", at)
			}
			stopped := at[0].stopAt
			t.Logf("cut off at 0 s, database back at %.2f s, program stopped at %.2f s", back-cut, stopped-cut)
			if c.outage < stopAfter {
				// Not the lease: the cancel, seen at the first beat
				// that landed (one in flight when the database came
				// back may first time out after a beat).
				if stopped < back-0.5 {
					t.Errorf("the program stopped %.2f s before the database answered again: not by the cancel", back-stopped)
				}
				if limit := back + secs(2*beat+hostGrace+time.Second); stopped > limit {
					t.Errorf("the program stopped %.2f s after the database answered again, more than a beat (%s) and the grace", stopped-back, beat)
				}
				if o := raw.Lookup("outcome").StringValue(); o != queue.OutcomeCancelled {
					t.Errorf("outcome %q, want %q: %s", o, queue.OutcomeCancelled, raw)
				}
			} else {
				// The lease ran out first: stopped within the outage, no
				// later than stopAfter, a beat and the grace after the
				// last beat that landed (at most a beat before the cut).
				if stopped >= back {
					t.Errorf("the program stopped %.2f s after the database answered again, not when its lease ran out", stopped-back)
				}
				if limit := cut + secs(beat+stopAfter+beat+hostGrace+time.Second); stopped > limit {
					t.Errorf("the program stopped %.2f s after its runner was cut off, later than its lease allows", stopped-cut)
				}
			}
			if n, _ := raw.Lookup("attempts").AsInt64OK(); n != 0 || raw.Lookup("history").Type != 0 {
				t.Errorf("the cancelled task was run again: %s; its first attempt's stderr: %q", raw, historyStderr(t, d, raw))
			}
		})
	}
}

// A node frozen (SIGSTOP) while its runner, which connects to the
// database itself (runner.relay: false), runs a task for longer than
// dead_node_after: the runner's beats land, so its lease holds. The node
// on another host, which takes the frozen node for dead, leaves the task
// to it; nothing stops the program; the task succeeds once, in one
// attempt.
func TestTwoHostsFrozenNodesRunnerKeepsItsTask(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0})
	stamps := filepath.Join(t.TempDir(), "stamps")
	// A lease four times the other tests': what this test checks is that
	// the lease holds while the runner's beats land, and in CI a beat has
	// been seen to wait more than 5 s, and once more than 10 s, while
	// other tests of the package kept the development server (which runs
	// one write at a time) busy scanning their hostile documents. The
	// task runs for the lease and 35 s more, so that it goes on for
	// longer than the lease after the freeze even when starting node b
	// takes a while, and ends within waitFor's two minutes.
	const lease = 4 * hostLease
	const ticks = 5 * int((lease+35*time.Second)/time.Second) // 0.2 s each: 75 s and more
	id := dentest.Tasks(t, d, qid, bson.D{{Key: "shell", Value: stampProgram(stamps, ticks)}})[0]
	leaseEnv := envNodeLease + "=" + lease.String()
	a, _ := nodeProcess(t, d, "a", envNodeDirect+"=1", leaseEnv)
	waitTicking(t, d, id, stamps)
	hostProcess(t, d, "b", "den-test-b", leaseEnv)
	freeze(t, a)
	frozen := uptime(t)
	raw := dentest.WaitStatus(t, d, id, 1)
	at := attempts(t, stamps)
	if len(at) != 1 || !at[0].end || at[0].stop || at[0].stampLines != ticks+2 {
		t.Fatalf("want one attempt that ran to its end (%d stamps): %+v", ticks+2, at)
	}
	t.Logf("node a frozen; its runner's program ran on for %.2f s to its end", at[0].last-frozen)
	if raw.Lookup("node").StringValue() != "a" || raw.Lookup("history").Type != 0 {
		t.Errorf("the task was taken from the runner that held it: %s", raw)
	}
	if n, _ := raw.Lookup("attempts").AsInt64OK(); n != 0 {
		t.Errorf("attempts %d, want 0: %s", n, raw)
	}
	// The test proves something only if node b took node a for dead
	// while the task ran: a's last node document is older than
	// dead_node_after when the task ended, and b (started before the
	// freeze) still writes its own after.
	ended := raw.Lookup("mtime").Time()
	waitPasses(t, d, []string{"b"}, 1, 0)
	aLast, bLast := heartbeat(t, d, "a"), heartbeat(t, d, "b")
	if ended.Sub(aLast) <= lease || !bLast.After(ended) {
		t.Fatalf("node a's last beat %s, b's %s, the task ended %s: node b never took a for dead, the test proves nothing", aLast, bLast, ended)
	}
}
