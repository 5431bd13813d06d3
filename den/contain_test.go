package den_test

import (
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
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/plugins/command"
)

// containment is one way a node can contain runs: by process tree only
// (a subreaper and the run marker), or with a cgroup per run as well.
type containment struct {
	name    string
	cgroups string
}

// containments returns the ways this machine can contain runs; the cgroup
// one is skipped, with the reason, where no cgroup v2 is delegated to us.
func containments(t *testing.T) []containment {
	return []containment{{"subreaper", "off"}, {"cgroup", "on"}}
}

func (c containment) start(t *testing.T) {
	t.Helper()
	if c.cgroups == "on" {
		if _, err := contain.DetectCgroup(); err != nil {
			t.Skipf("cgroup containment cannot be checked here: %v", err)
		}
	}
}

// inEachContainment runs test as a parallel subtest per containment this
// machine has.
func inEachContainment(t *testing.T, test func(t *testing.T, c containment)) {
	t.Helper()
	for _, c := range containments(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.start(t)
			test(t, c)
		})
	}
}

// liveProcess reports whether pid is a process that has not exited (a
// zombie has).
func liveProcess(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// proc is a process known by its pid and its start time, so that a pid the
// kernel has given to another process since (pid_max is often 32768, and
// the test suite starts many processes) is not taken for it.
type proc struct {
	pid   int
	start string // field 22 of /proc/PID/stat; empty when already gone
}

// statFields returns the fields of /proc/PID/stat after the command name,
// starting with the state (field 3).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// readProcs reads the pids a program wrote to file, and their start times.
func readProcs(t *testing.T, file string) []proc {
	t.Helper()
	var out []proc
	for _, pid := range readPids(t, file) {
		p := proc{pid: pid}
		if f := statFields(pid); len(f) > 19 {
			p.start = f[19]
		}
		out = append(out, p)
	}
	return out
}

// alive reports whether the process still runs (a zombie does not).
func (p proc) alive() bool {
	f := statFields(p.pid)
	return len(f) > 19 && p.start != "" && f[19] == p.start && f[0] != "Z"
}

// kill kills the process if it is still the same one.
func (p proc) kill() {
	if p.alive() {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

func readPids(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read pids: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids file %q", b)
		}
		pids = append(pids, n)
	}
	return pids
}

// escapers is a shell fragment that starts processes trying to outlive
// their task, each writing its pid to $dir/pids: one in a session of its
// own, a double-forked one that ignores SIGTERM, and one whose parent exits
// at once.
func escapers(dir string) string {
	return fmt.Sprintf(`
setsid sleep 1001 & echo $! >> %[1]s/pids
( ( trap "" TERM; exec sleep 1002 ) & echo $! >> %[1]s/pids )
sh -c 'sleep 1003 & echo $! >> %[1]s/pids'
`, dir)
}

// startEscapers inserts a task whose program starts escapers and then
// tail, with extra set on it, calls startNode after the first insert, and
// waits until the program has started its children. A task with a timeout
// can end before that on a loaded machine (its clock runs from the
// claim): it is then inserted again with twice the timeout, until the test
// binary's deadline, so that the test waits for the program and not for a
// bound on how fast it starts. It returns the task and its directory.
func startEscapers(t *testing.T, db *mongo.Database, qid bson.ObjectID, tail string, extra bson.E, startNode func()) (bson.ObjectID, string) {
	t.Helper()
	timeout, _ := extra.Value.(int)
	for first := true; ; first = false {
		dir := t.TempDir()
		params := bson.D{{Key: "shell", Value: escapers(dir) + "touch " + dir + "/ready\n" + tail}}
		id := dentest.Tasks(t, db, qid, params)[0]
		if extra.Key != "" {
			if extra.Key == "timeout" {
				extra.Value = timeout
			}
			if _, err := db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{extra}}}); err != nil {
				t.Fatal(err)
			}
		}
		if first {
			startNode()
		}
		ended := false
		dentest.Eventually(t, time.Minute, "the program started its children", func() bool {
			if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
				return true
			}
			if timeout > 0 {
				raw, err := db.Collection("tasks").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}).Raw()
				if st, ok := raw.Lookup("status").AsInt64OK(); err == nil && ok && st >= 1 {
					ended = true
					return true
				}
			}
			return false
		})
		if !ended {
			return id, dir
		}
		if time.Now().After(dentest.Deadline()) {
			t.Fatalf("at the test's deadline the program had not started its children within its timeout of %d s", timeout)
		}
		t.Logf("the task's %d s timeout fired before its program had started its children (a loaded machine): again with %d s", timeout, 2*timeout)
		timeout *= 2
	}
}

// Every process a task starts is stopped when the task ends, however it
// ends, before its result is recorded: in a session of its own, double
// forked, or ignoring SIGTERM (SIGKILL after max_termination_time).
func TestContainmentStopsEveryProcessWhenTaskEnds(t *testing.T) {
	t.Parallel()
	endings := []struct {
		name   string
		tail   string
		extra  bson.E
		cancel bool
		want   int64
	}{
		{name: "exit 0", tail: "exit 0", want: 1},
		{name: "exit 3", tail: "exit 3", want: 2},
		{name: "timeout", tail: "sleep 60", extra: bson.E{Key: "timeout", Value: 2}, want: 2},
		{name: "cancel", tail: "sleep 60", cancel: true, want: -5},
	}
	for _, c := range containments(t) {
		for _, e := range endings {
			t.Run(c.name+"/"+e.name, func(t *testing.T) {
				t.Parallel()
				c.start(t)
				db := dentest.DB(t)
				qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
				id, dir := startEscapers(t, db, qid, e.tail, e.extra, func() {
					startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
				})
				pids := readProcs(t, filepath.Join(dir, "pids"))
				if len(pids) != 3 {
					t.Fatalf("pids %v", pids)
				}
				if c.cgroups == "on" {
					cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0].pid))
					if !strings.Contains(string(cg), "den-run-"+id.Hex()) {
						t.Errorf("the task's process is not in the run's cgroup: %s", cg)
					}
				}
				if e.cancel {
					cancel(t, db, id)
				}
				raw := dentest.WaitStatus(t, db, id, e.want)
				// Checked at once: they were stopped before the result was
				// recorded, not some time after.
				for _, p := range pids {
					if p.alive() {
						t.Errorf("process %d outlived its task (%s)", p.pid, e.name)
						p.kill()
					}
				}
				if n, _ := raw.Lookup("leftover_processes").AsInt64OK(); n < 1 {
					t.Errorf("leftover_processes %v, want at least the one in its own session", raw.Lookup("leftover_processes"))
				}
				if c.cgroups == "on" {
					// Removed by the supervisor once its worker has exited,
					// a moment after the result is recorded.
					dentest.Eventually(t, 30*time.Second, "the run's cgroup is removed", func() bool {
						entries, _ := filepath.Glob(filepath.Join(mustCgroup(t), "den-run-"+id.Hex()+"-*"))
						return len(entries) == 0
					})
				}
			})
		}
	}
}

func mustCgroup(t *testing.T) string {
	dir, err := contain.DetectCgroup()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// workerOf returns the task runner worker under the supervisor pid: its
// child running the same executable. A subreaper's children also include
// the task's orphans, and /proc/PID/task/TID/children lists only the
// children a given thread started, so every thread is looked at.
func workerOf(t *testing.T, pid int) int {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	threads, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range threads {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			if e, err := os.Readlink("/proc/" + c + "/exe"); err == nil && e == exe {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	t.Fatalf("no task runner worker under supervisor %d", pid)
	return 0
}

// A task runner killed with SIGKILL (its supervisor, the pid the task
// records, or the worker under it) does not leave its program running: the
// retry starts only once every process of the killed run is gone, and
// nothing of it survives.
func TestContainmentKilledRunnerRetryNeverOverlaps(t *testing.T) {
	t.Parallel()
	for _, c := range containments(t) {
		for _, victim := range []string{"supervisor", "worker"} {
			t.Run(c.name+"/"+victim, func(t *testing.T) {
				t.Parallel()
				c.start(t)
				db := dentest.DB(t)
				dir := t.TempDir()
				qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
				script := fmt.Sprintf(`
# A process is known by its pid and start time (stat field 22): pids are
# reused. State and start time come from one read of stat: a zombie of the
# killed run may be reaped between two reads, and must not then look alive.
if [ -e %[1]s/first ]; then
  while read p st; do
    s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null)
    state=$(echo "$s" | cut -d' ' -f1); now=$(echo "$s" | cut -d' ' -f20)
    if [ -n "$st" ] && [ "$now" = "$st" ] && [ "$state" != Z ] && [ "$state" != X ]; then
      echo "OVERLAP $p: state $state, $(grep -E '^(PPid|SigPnd|ShdPnd)' /proc/$p/status 2>/dev/null | tr '\n' ' ')cgroup $(tr '\n' ' ' < /proc/$p/cgroup 2>/dev/null)$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep DEN_RUN) $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"
    fi
  done < %[1]s/ids
  echo second run
  exit 0
fi
touch %[1]s/first
started() { sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f20; }
setsid sh -c 'trap "" TERM; while :; do sleep 0.2; done' & echo $! >> %[1]s/pids
%[2]s
for p in $(cat %[1]s/pids); do echo "$p $(started $p)" >> %[1]s/ids; done
touch %[1]s/ready
sleep 1000
`, dir, escapers(dir))
				id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0]
				if _, err := db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 1}, {Key: "retry_delay", Value: 0}}}}); err != nil {
					t.Fatal(err)
				}
				startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
				dentest.Eventually(t, time.Minute, "the first run started its children", func() bool {
					_, err := os.Stat(filepath.Join(dir, "ready"))
					return err == nil
				})
				pids := readProcs(t, filepath.Join(dir, "pids"))
				if len(pids) != 4 {
					t.Fatalf("pids %v, want the first run's 4 processes", pids)
				}
				target := runnerPID(t, db, id)
				if victim == "worker" {
					target = workerOf(t, target)
				}
				if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				raw := dentest.WaitStatus(t, db, id, 1)
				for _, p := range pids {
					if p.alive() {
						t.Errorf("process %d of the killed run survived", p.pid)
						p.kill()
					}
				}
				out := raw.Lookup("stdout").StringValue()
				if strings.Contains(out, "OVERLAP") || !strings.Contains(out, "second run") {
					t.Errorf("the retry overlapped the killed run: %q", out)
				}
				h, _ := raw.Lookup("history").Array().Values()
				if len(h) != 1 {
					t.Fatalf("history %v", h)
				}
				if victim == "supervisor" {
					// The node stopped them, and says so.
					if n, _ := h[0].Document().Lookup("leftover_processes").AsInt64OK(); n < 2 {
						t.Errorf("history leftover_processes %v, want the processes the node stopped", h[0].Document().Lookup("leftover_processes"))
					}
				}
			})
		}
	}
}

// With a cgroup per run, even a process that clears its environment (so it
// carries no run marker) and leaves the process tree with setsid is stopped
// when the runner is SIGKILLed. Without a delegated cgroup this is the one
// case den cannot catch (README: Containment).
func TestContainmentCgroupCatchesProcessesWithoutMarker(t *testing.T) {
	t.Parallel()
	c := containment{"cgroup", "on"}
	c.start(t)
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	script := fmt.Sprintf(`
env -i setsid sleep 1004 & echo $! >> %[1]s/pids
touch %[1]s/ready
sleep 1000
`, dir)
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0]
	startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
	dentest.Eventually(t, time.Minute, "the run started its child", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	pids := readProcs(t, filepath.Join(dir, "pids"))
	if len(pids) != 1 {
		t.Fatalf("pids %v, want the run's one process", pids)
	}
	if err := syscall.Kill(runnerPID(t, db, id), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	raw := dentest.WaitStatus(t, db, id, -6)
	for _, p := range pids {
		if p.alive() {
			t.Errorf("process %d without the run marker survived its killed runner", p.pid)
			p.kill()
		}
	}
	if n, _ := raw.Lookup("leftover_processes").AsInt64OK(); n < 1 {
		t.Errorf("leftover_processes %v", raw.Lookup("leftover_processes"))
	}
}
