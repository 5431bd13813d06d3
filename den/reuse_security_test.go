package den_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// These tests attack runner reuse (a runner serving tasks of one queue one
// after another, den/internal/runners/pool.go and den/runner/worker/tasks.go): nothing of a task
// may reach the next task of the same runner, and nothing meant for a task
// (a cancel, a SIGKILL, a forged runner field) may reach the next. Each
// forces reuse (maxthreads 1, tasks inserted together) and checks that it
// happened: the same runner pid, another run token.

// Test::Abandon starts "sleep 600" (with the runner's environment, so with
// the run marker) and returns at once without waiting for it, as a plugin
// that abandons a program does; it writes the program's pid to
// parameters.pidfile. With parameters.wait it first waits for that file to
// exist (or ctx); with parameters.stubborn it ignores ctx while it waits
// (a plugin that does not stop when asked), then writes the run marker it
// sees to parameters.leak.
const abandonPlugin = "Test::Abandon"

func init() {
	plugins.Register(abandonPlugin, plugins.Func(abandonRun))
}

func abandonRun(ctx context.Context, t *queue.Task, env plugins.Env) (int, error) {
	var p struct {
		PIDFile  string `bson:"pidfile"`
		Wait     string `bson:"wait"`
		Stubborn bool   `bson:"stubborn"`
		Leak     string `bson:"leak"`
	}
	if err := t.DecodeParameters(&p); err != nil {
		return 2, err
	}
	if p.Stubborn {
		dentest.Until(50*time.Millisecond, func() bool {
			_, err := os.Stat(p.Wait)
			return err == nil
		})
		os.WriteFile(p.Leak, []byte(os.Getenv(plugins.EnvRun)), 0o644)
		return 1, nil
	}
	if p.Wait != "" {
		for {
			if _, err := os.Stat(p.Wait); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return 2, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if p.PIDFile == "" {
		return 1, nil
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		return 2, err
	}
	if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return 2, err
	}
	fmt.Fprintf(env.Stdout, "started %d\n", cmd.Process.Pid)
	return 1, nil
}

// runnerInfo returns the runner field of a task.
func runnerInfo(t *testing.T, raw bson.Raw) queue.RunnerInfo {
	t.Helper()
	var r queue.RunnerInfo
	v, err := raw.LookupErr("runner")
	if err != nil {
		t.Fatalf("task has no runner field: %s", raw)
	}
	if err := v.Unmarshal(&r); err != nil {
		t.Fatalf("runner field %s: %v", v, err)
	}
	return r
}

// assertReused fails the test unless b's run was served by the runner that
// served a, as a run of its own (another token).
func assertReused(t *testing.T, a, b queue.RunnerInfo) {
	t.Helper()
	if a.PID != b.PID || a.Started != b.Started {
		t.Fatalf("no reuse: the runners were %d (started %d) and %d (started %d); the test proves nothing", a.PID, a.Started, b.PID, b.Started)
	}
	if a.Token == b.Token {
		t.Fatalf("a reused runner served two tasks with the same run token %s", a.Token.Hex())
	}
}

// field is a string field of a task, "" when it has none.
func field(raw bson.Raw, key string) string {
	s, _ := raw.Lookup(key).StringValueOK()
	return s
}

// waitFile waits for a file a program creates.
func waitFile(t *testing.T, path string) {
	t.Helper()
	dentest.Eventually(t, time.Minute, "file "+filepath.Base(path), func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// environOf returns the environment a process was started with.
func environOf(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// Claims 1 and 2: a task that leaves processes behind (its own session,
// double forked, ignoring SIGTERM) gets them all stopped before its result
// is recorded, so that none of them lives on into the next task its runner
// serves; the next task's programs carry the next run's marker; the worker
// carries none (a leftover search for the first run finds nothing, not the
// live worker either); and the supervisor proves the second run, not the
// first.
func TestReuseNothingOfTaskReachesNextTask(t *testing.T) {
	t.Parallel()
	inEachContainment(t, func(t *testing.T, c containment) {
		db := dentest.DB(t)
		dir := t.TempDir()
		qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
		first := escapers(dir) + fmt.Sprintf(`
setsid sh -c 'trap "" TERM; while :; do sleep 0.2; done' & echo $! >> %[1]s/pids
echo "$DEN_RUN" > %[1]s/run1
exit 0
`, dir)
		second := fmt.Sprintf(`
ls -l /proc/$$/fd/ > %[1]s/fds2
echo "$DEN_RUN" > %[1]s/run2.tmp && mv %[1]s/run2.tmp %[1]s/run2
while [ ! -e %[1]s/go ]; do sleep 0.1; done
`, dir)
		ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: first}}, bson.D{{Key: "shell", Value: second}})
		startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
		rawA := dentest.WaitStatus(t, db, ids[0], 1)
		// Checked at once: stopped before the result was recorded.
		pids := readProcs(t, filepath.Join(dir, "pids"))
		if len(pids) != 4 {
			t.Fatalf("pids %v, want the first task's 4 processes", pids)
		}
		for _, p := range pids {
			if p.alive() {
				t.Errorf("process %d of the first task is alive after its result was recorded", p.pid)
			}
		}
		waitFile(t, filepath.Join(dir, "run2"))
		a, b := runnerInfo(t, rawA), runnerInfo(t, dentest.Task(t, db, ids[1]))
		assertReused(t, a, b)
		markA, markB := contain.Marker(ids[0].Hex(), a.Token.Hex()), contain.Marker(ids[1].Hex(), b.Token.Hex())
		if got, _ := os.ReadFile(filepath.Join(dir, "run1")); strings.TrimSpace(string(got)) != markA {
			t.Errorf("the first task's program had DEN_RUN %q, want %q", got, markA)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "run2")); strings.TrimSpace(string(got)) != markB {
			t.Errorf("the second task's program had DEN_RUN %q, want %q (the first run's is %q)", got, markB, markA)
		}
		for _, p := range pids {
			if p.alive() {
				t.Errorf("process %d of the first task lives on while the runner serves the second", p.pid)
				p.kill()
			}
		}
		// The task channel (and the control and relay sockets) never
		// reach a task's program: it could take tasks, or say one is done.
		if fds, _ := os.ReadFile(filepath.Join(dir, "fds2")); strings.Contains(string(fds), "socket:") || !strings.Contains(string(fds), "0 ->") {
			t.Errorf("the second task's program holds a socket:\n%s", fds)
		}
		worker := workerOf(t, b.PID)
		for _, e := range environOf(worker) {
			if strings.HasPrefix(e, contain.EnvRun+"=") {
				t.Errorf("the worker %d carries %s in /proc/PID/environ", worker, e)
			}
		}
		if left := contain.Marked(dentest.Context(t), markA, 0); len(left) > 0 {
			t.Errorf("processes %v still carry the first run's marker while the runner serves the second", left)
		}
		if got, held := contain.ProvenRun(b.PID); !held || got != markB {
			t.Errorf("the supervisor proves run %q (held %v), want the second run %q", got, held, markB)
		}
		touch(t, filepath.Join(dir, "go"))
		dentest.WaitStatus(t, db, ids[1], 1)
	})
}

// A reused runner is clean between runs: a program still a child of the
// worker when its task ends (a plugin that abandoned it): it is stopped
// before the result is recorded, as a program that escaped to the
// supervisor is, and never lives on into the next task of the runner with
// the previous run's marker.
func TestReuseAbandonedProgramDoesNotReachNextTask(t *testing.T) {
	t.Parallel()
	inEachContainment(t, testReuseAbandonedProgram)
}

func testReuseAbandonedProgram(t *testing.T, c containment) {
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "q", abandonPlugin, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	pidfile := filepath.Join(dir, "abandoned")
	ids := dentest.Tasks(t, db, qid,
		bson.D{{Key: "pidfile", Value: pidfile}},
		bson.D{{Key: "wait", Value: filepath.Join(dir, "go")}})
	startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
	rawA := dentest.WaitStatus(t, db, ids[0], 1)
	pids := readProcs(t, pidfile) // at once: it must be gone already
	if len(pids) != 1 {
		t.Fatalf("pids %v", pids)
	}
	abandoned := pids[0]
	t.Cleanup(abandoned.kill)
	aliveAtRecord := abandoned.alive()
	dentest.Eventually(t, time.Minute, "the second task runs", func() bool { return status(t, db, ids[1]) == 0 })
	a, b := runnerInfo(t, rawA), runnerInfo(t, dentest.Task(t, db, ids[1]))
	assertReused(t, a, b)
	if aliveAtRecord {
		t.Errorf("the program the first task's plugin abandoned (pid %d) was alive when its result was recorded", abandoned.pid)
	}
	if abandoned.alive() {
		markA := contain.Marker(ids[0].Hex(), a.Token.Hex())
		var env string
		for _, e := range environOf(abandoned.pid) {
			if strings.HasPrefix(e, contain.EnvRun+"=") {
				env = e
			}
		}
		t.Errorf("the first task's program %d (%s; the first run is %s) lives on while its runner serves the second task", abandoned.pid, env, markA)
	}
	touch(t, filepath.Join(dir, "go"))
	dentest.WaitStatus(t, db, ids[1], 1)
}

// A reused runner runs no code of an earlier task: a plugin that does not
// stop when its task is cancelled or times out is abandoned after its grace, and the task recorded without
// it; it still runs in the worker. That runner must take no other task:
// the abandoned plugin would run on inside the next task's run (its
// marker, its cgroup, its usage).
func TestReuseRunnerWithAbandonedPluginTakesNoOtherTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "q", abandonPlugin, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	release := filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	ids := dentest.Tasks(t, db, qid,
		bson.D{{Key: "stubborn", Value: true}, {Key: "wait", Value: release}, {Key: "leak", Value: filepath.Join(dir, "leak")}},
		bson.D{{Key: "wait", Value: filepath.Join(dir, "go")}})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "timeout", Value: 1}}}})
	startNode(t, db, "n")
	rawA := dentest.WaitEnded(t, db, ids[0])
	if !strings.Contains(field(rawA, "stderr"), "recorded without it") {
		t.Fatalf("the first task's plugin was not abandoned: %s", rawA)
	}
	dentest.Eventually(t, time.Minute, "the second task runs", func() bool { return status(t, db, ids[1]) == 0 })
	a, b := runnerInfo(t, rawA), runnerInfo(t, dentest.Task(t, db, ids[1]))
	if a.PID == b.PID && a.Started == b.Started {
		// The first task's plugin cannot have returned: release is not there.
		t.Errorf("runner %d, whose worker still runs the first task's abandoned plugin, took the second task", a.PID)
		touch(t, release)
		leak := filepath.Join(dir, "leak")
		dentest.Eventually(t, time.Minute, "the abandoned plugin goes on", func() bool {
			_, err := os.Stat(leak)
			return err == nil
		})
		got, _ := os.ReadFile(leak)
		t.Errorf("the first task's plugin ran on inside the second task's run (DEN_RUN %s; the second run is %s)",
			got, contain.Marker(ids[1].Hex(), b.Token.Hex()))
	}
	touch(t, filepath.Join(dir, "go"))
	dentest.WaitStatus(t, db, ids[1], 1)
}

// A reused runner cannot be pointed at by a forged document: a forged
// runner field, in a task document of another node, naming a reused runner (its pid and start time) with a task id it served
// before (the one in its spec, with that run's true token), another task
// id with the current run's token, or a random token, makes the node
// signal nothing; nor does one of the same node naming its pooled runner.
// The reused runner's current task runs on to its own result.
func TestReuseForgedRunnerOfReusedRunnerSignalsNothing(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	second := fmt.Sprintf(`
trap 'echo got TERM; exit 7' TERM
touch %[1]s/running
while [ ! -e %[1]s/go ]; do sleep 0.1; done
echo finished
`, dir)
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "exit 0"}}, bson.D{{Key: "shell", Value: second}})
	startNode(t, db, "n", func(cfg *den.Config) { cfg.MaxTermination = 100 * time.Millisecond })
	rawA := dentest.WaitStatus(t, db, ids[0], 1)
	waitFile(t, filepath.Join(dir, "running"))
	a, b := runnerInfo(t, rawA), runnerInfo(t, dentest.Task(t, db, ids[1]))
	assertReused(t, a, b)

	// The first task's document is replaced by a forged one of node n2:
	// same _id (the task in the runner's spec), the first run's token.
	dentest.Delete(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}})
	other := dentest.Queue(t, db, "other", command.Name, 0, "fifo")
	forge := func(id bson.ObjectID, node string, token bson.ObjectID) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: other}, {Key: "node", Value: node}, {Key: "status", Value: 0},
			{Key: "cancel", Value: true}, {Key: "parameters", Value: bson.D{}},
			{Key: "runner", Value: bson.D{{Key: "token", Value: token}, {Key: "pid", Value: b.PID}, {Key: "started", Value: b.Started}, {Key: "host", Value: b.Host}}}}
	}
	forged := []bson.D{
		forge(ids[0], "n2", a.Token),             // the task in its spec, that run's true token
		forge(bson.NewObjectID(), "n2", b.Token), // the current run's token, another task
		forge(bson.NewObjectID(), "n2", bson.NewObjectID()),
		forge(bson.NewObjectID(), "n", b.Token), // the node that pools the runner
		forge(bson.NewObjectID(), "n", a.Token),
	}
	for _, d := range forged {
		dentest.Insert(t, db.Collection("tasks"), d)
	}
	startNode(t, db, "n2", func(cfg *den.Config) { cfg.MaxTermination = 100 * time.Millisecond })
	// Each node records -5 for its forged tasks once their grace is over,
	// having tried SIGTERM then SIGKILL (if it could prove the runner).
	dentest.Eventually(t, 2*time.Minute, "the forged tasks recorded cancelled", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: other}, {Key: "status", Value: -5}}) == int64(len(forged))
	})
	if st := status(t, db, ids[1]); st != 0 {
		t.Fatalf("the reused runner's task has status %d, want still running (0)", st)
	}
	if !liveProcess(b.PID) {
		t.Fatalf("the reused runner %d was killed", b.PID)
	}
	touch(t, filepath.Join(dir, "go"))
	raw := dentest.WaitStatus(t, db, ids[1], 1)
	if out := field(raw, "stdout"); strings.Contains(out, "got TERM") || !strings.Contains(out, "finished") {
		t.Errorf("the reused runner's task was signalled: stdout %q", out)
	}
}

// A node restart does not hand a runner of the old process new work: a
// runner of a node process that was killed finishes its task and takes no
// other (the next task of its queue runs on a runner of the
// new node process); the new node does not rescue the running task, still
// proves the runner (a cancel reaches its program by signal).
func TestReuseRunnerOfKilledNodeTakesNoOtherTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 5})
	first := fmt.Sprintf(`
trap 'echo got TERM; exit 7' TERM
touch %[1]s/running
while :; do sleep 0.1; done
`, dir)
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: first}}, bson.D{{Key: "shell", Value: "echo second"}})
	node, _ := nodeProcess(t, db, "v")
	waitFile(t, filepath.Join(dir, "running"))
	a := runnerInfo(t, dentest.Task(t, db, ids[0]))
	kill(t, node.Process.Pid, syscall.SIGKILL)
	node.Wait()
	// A task of another queue shows the new node process has been through
	// its passes (rescue included) a few times.
	probe := dentest.Queue(t, db, "probe", command.Name, 1, "fifo")
	probeID := dentest.Tasks(t, db, probe, bson.D{{Key: "shell", Value: "exit 0"}})[0]
	nodeProcess(t, db, "v")
	dentest.WaitStatus(t, db, probeID, 1)
	raw := dentest.Task(t, db, ids[0])
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 0 {
		t.Fatalf("the old node's running task has status %d after the restart, want 0 (running): %s", st, raw)
	}
	if r := runnerInfo(t, raw); r.Token != a.Token {
		t.Fatalf("the old node's running task was started again: token %s, was %s", r.Token.Hex(), a.Token.Hex())
	}
	if st := status(t, db, ids[1]); st != -2 {
		t.Fatalf("the second task has status %d while the first runs, want -2 (queued)", st)
	}
	cancel(t, db, ids[0])
	rawA := dentest.WaitStatus(t, db, ids[0], -5)
	if out := field(rawA, "stdout"); !strings.Contains(out, "got TERM") {
		t.Errorf("the cancel did not reach the old node's runner by signal: stdout %q, stderr %s", out, rawA.Lookup("stderr"))
	}
	if h, err := rawA.LookupErr("history"); err == nil {
		t.Errorf("the old node's task was rescued: history %s", h)
	}
	rawB := dentest.WaitStatus(t, db, ids[1], 1)
	if b := runnerInfo(t, rawB); b.PID == a.PID && b.Started == a.Started {
		t.Errorf("the runner of the killed node process (%d) took another task", a.PID)
	}
	dentest.Eventually(t, time.Minute, "the old node's runner exits", func() bool { return !liveProcess(a.PID) })
}

// A reused runner measures each run from zero (the second task's
// CPU does not include the first's), and the first task's memory request
// does not limit the second.
func TestReuseUsageAndMemoryLimitArePerRun(t *testing.T) {
	t.Parallel()
	inEachContainment(t, testReuseUsagePerRun)
}

func testReuseUsagePerRun(t *testing.T, c containment) {
	db := dentest.DB(t)
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	// About 1.5 s of CPU in a child (clock ticks of its own, read from
	// /proc), whatever the machine's load.
	spin := `sh -c 'while [ $(cut -d" " -f14 /proc/$$/stat) -lt 150 ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; done'`
	// About 100 MiB held for a while: past the first task's request.
	hold := fmt.Sprintf(`x=$(head -c 100000000 /dev/zero | tr '\0' a); touch %[1]s/held; sleep 3; echo ${#x}`, dir)
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: spin}}, bson.D{{Key: "shell", Value: "exit 0"}}, bson.D{{Key: "shell", Value: hold}})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "requested_resources", Value: bson.D{{Key: "memory_mb", Value: 20}}}}}})
	startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
	rawA, rawB, rawC := dentest.WaitEnded(t, db, ids[0]), dentest.WaitEnded(t, db, ids[1]), dentest.WaitEnded(t, db, ids[2])
	for i, raw := range []bson.Raw{rawA, rawB, rawC} {
		if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 {
			t.Errorf("task %d has status %d, want 1: %s", i+1, st, raw)
		}
	}
	a, b, third := runnerInfo(t, rawA), runnerInfo(t, rawB), runnerInfo(t, rawC)
	assertReused(t, a, b)
	assertReused(t, b, third)
	ua, ub := usageOf(t, "first task", rawA), usageOf(t, "second task", rawB)
	cpuA, cpuB := ua.CPUUserS+ua.CPUSystemS, ub.CPUUserS+ub.CPUSystemS
	if cpuA < 1.4 {
		t.Fatalf("the first task used %.2f s of CPU, want at least the 1.5 s its child spun", cpuA)
	}
	if cpuB >= 1 {
		t.Errorf("the second task (exit 0) is charged %.2f s of CPU; the first used %.2f s", cpuB, cpuA)
	}
	if out := field(rawC, "stdout"); !strings.Contains(out, "100000000") {
		t.Errorf("the third task's output %q (stderr %s)", out, rawC.Lookup("stderr"))
	}
}

// A reused run's peak memory is its own: memory the worker took for the
// run before (a large output, held in the worker until it was written)
// is given back before the runner takes the next task, and the worker's
// peak RSS, which the programs it starts inherit as their ru_maxrss, is
// reset. A small task after a large one is then not charged for the large
// one (it was charged 160 MB here), nor does an idle runner keep it. The
// same small task on a fresh runner is the measure; a worker that has run
// a task keeps a little more of its own (its connection's buffers, more
// of its binary paged in: about 16 MB here), hence the margin.
//
// Under -race the runner's RSS cannot fall: the race detector keeps shadow
// memory for every heap page the worker ever used. .ci/run therefore runs
// this test a second time without -race.
func TestReusedRunPeakIsItsOwn(t *testing.T) {
	if raceBuild {
		t.Skip("built with -race: the race detector's shadow memory keeps the worker's RSS up (.ci/run runs this test without -race)")
	}
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	// About 14 MB of output, kept in the task document (gfs false): the
	// worker holds it, copies it and encodes it into the finish.
	big := `head -c 14000000 /dev/zero | tr '\0' a`
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: big}}, bson.D{{Key: "shell", Value: "exit 0"}})
	startNode(t, db, "n", func(cfg *den.Config) { cfg.GFS = "false" })
	rawA, rawB := dentest.WaitEnded(t, db, ids[0]), dentest.WaitEnded(t, db, ids[1])
	for i, raw := range []bson.Raw{rawA, rawB} {
		if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 {
			t.Fatalf("task %d has status %d, want 1: %.300s", i+1, st, raw)
		}
	}
	assertReused(t, runnerInfo(t, rawA), runnerInfo(t, rawB))

	fresh := dentest.DB(t)
	fq := dentest.Queue(t, fresh, "cmd", command.Name, 1, "fifo")
	fid := dentest.Tasks(t, fresh, fq, bson.D{{Key: "shell", Value: "exit 0"}})[0]
	startNode(t, fresh, "fresh", func(cfg *den.Config) { cfg.GFS = "false"; cfg.Runner.MaxTasks = 1 })
	rawC := dentest.WaitEnded(t, fresh, fid)
	ua, ub, uc := usageOf(t, "large task", rawA), usageOf(t, "small task after it", rawB), usageOf(t, "small task, fresh runner", rawC)
	if ub.PeakRSSMB > uc.PeakRSSMB+25 {
		t.Fatalf("a small task after a large one in the same runner peaked at %.1f MB; on a fresh runner %.1f MB (the large one: %.1f MB)",
			ub.PeakRSSMB, uc.PeakRSSMB, ua.PeakRSSMB)
	}
}
