package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
)

// supervise runs the supervisor: it starts the worker, reaps every child
// it is given, answers the worker's requests, and once the worker has
// exited stops whatever is left and exits with the worker's code. Asked
// to stop (SIGTERM, SIGINT), it passes the signal on to the worker, which
// stops the run as a cancel does and records what it can; a worker that
// has not exited StopWithin the task's grace after that (hung, or
// stopped) is killed, and the rest stopped as for any dead worker. The
// relay control channel and the task channel, if any, go to the worker and
// to no other process; the supervisor keeps no copy.
func Main(spec runner.Spec, log *zap.Logger, relayCtl, tasksCh *os.File) int {
	for _, f := range []*os.File{relayCtl, tasksCh} {
		if f != nil {
			defer f.Close() // also on the early returns below
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Error("cannot become a child subreaper; refusing to run the task uncontained", zap.Error(err))
		return 2
	}
	// The first run is prepared before the worker starts, so that the
	// worker starts inside its cgroup; the worker begins it like any other.
	token := bson.NewObjectID()
	proof, err := contain.HoldProof(contain.Marker(spec.Task, token.Hex()))
	if err != nil {
		// A kernel without memfd (before 3.17). The node then proves this
		// runner by its spec, which names its one task: serve no other.
		log.Warn("no run proof on this kernel; this runner serves one task", zap.Error(err))
		spec.Reuse = false // the worker's spec, below
	}
	started := int64(0)
	if t, err := processStart(os.Getpid()); err == nil {
		started = t
	}
	var cgroup string
	var cgroupFD *os.File
	if spec.Cgroup != "" {
		cgroup = contain.RunCgroup(spec.Cgroup, spec.Task, token.Hex())
		f, err := contain.CreateCgroup(cgroup)
		if err != nil {
			log.Warn("cannot create the run's cgroup; containing it by process tree only", zap.Error(err))
			cgroup = ""
		} else {
			cgroupFD = f
			defer f.Close()
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Error("create the worker's control socket", zap.Error(err))
		return 2
	}
	// Non-blocking, so that reading it waits in the runtime's poller and
	// not in a read(2) that holds a thread: a thread blocked in a system
	// call keeps the runtime's monitor polling (every 20 µs at first),
	// which cost more CPU than the supervisor's own work per task.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		log.Error("create the worker's control socket", zap.Error(err))
		return 2
	}
	ours := os.NewFile(uintptr(fds[0]), "control")
	defer ours.Close()
	exe, err := os.Executable()
	if err != nil {
		log.Error("find this binary to start the worker", zap.Error(err))
		return 2
	}
	sigs := make(chan os.Signal, 16)
	// SIGUSR1 (the node asking for live output) is passed to the worker;
	// it stays caught after the worker exits, as its default action would
	// end the supervisor before it has stopped what the run left.
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	// The worker's environment carries no run marker: the marker of each
	// run is set for the programs of that run only (worker.Executor.Run), so that
	// the worker is never taken for a leftover of a run it has served.
	workerSpec, err := spec.Env()
	if err != nil {
		log.Error("hand the worker its spec", zap.Error(err))
		return 2
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, runner.SpecEnv+"=") })
	env = append(env, workerSpec, runner.EnvWorker+"=1", runner.EnvSupervisor+"="+strconv.Itoa(os.Getpid())+":"+strconv.FormatInt(started, 10))
	files := []uintptr{0, 1, 2, uintptr(fds[1])}
	if relayCtl != nil {
		env = append(env, runner.EnvRelayFD+"="+strconv.Itoa(len(files)))
		files = append(files, relayCtl.Fd())
	}
	if tasksCh != nil {
		env = append(env, runner.EnvTasksFD+"="+strconv.Itoa(len(files)))
		files = append(files, tasksCh.Fd())
	}
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if cgroupFD != nil {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, int(cgroupFD.Fd())
	}
	// The worker's PDEATHSIG fires when the thread that started it exits:
	// it is started from a thread that lives, locked, until the
	// supervisor returns. The loop below runs on any thread (a loop
	// locked to its thread hands its work over to that thread each time
	// it wakes: two more context switches per request of the worker).
	release := make(chan struct{})
	defer close(release)
	var worker int
	onLockedThread(release, func() {
		worker, err = syscall.ForkExec(exe, os.Args, attr)
		if err != nil && cgroupFD != nil {
			log.Warn("cannot start the worker inside the run's cgroup; containing it by process tree only", zap.Error(err))
			contain.RemoveCgroup(cgroup, time.Second)
			cgroup, attr.Sys.UseCgroupFD = "", false
			worker, err = syscall.ForkExec(exe, os.Args, attr)
		}
	})
	syscall.Close(fds[1])
	if err != nil {
		log.Error("start the task runner worker", zap.Error(err))
		return 2
	}
	for _, f := range []*os.File{relayCtl, tasksCh} {
		if f != nil {
			f.Close() // the worker has it; the node sees it close when the worker exits
		}
	}
	// The supervisor and its worker are walked several times per task
	// (leftovers, usage): their /proc files stay open.
	tree := contain.NewTree()
	defer tree.Close()
	for _, pid := range []int{os.Getpid(), worker} {
		if err := tree.Keep(int32(pid)); err != nil {
			log.Debug("cannot keep a runner process's /proc files open; reading them anew each time", zap.Error(err))
		}
	}
	s := &supervisor{base: log, log: log.With(zap.String("task_id", spec.Task)), worker: worker, root: spec.Cgroup, pidsRoot: spec.Pids, grace: runner.DefaultGrace,
		maxProcesses: spec.MaxProcesses,
		id:           bson.NewObjectID().Hex(),
		run:          runState{task: spec.Task, token: token.Hex(), cgroup: cgroup},
		proof:        proof,
		tree:         tree,
		usage:        &sampler{me: int32(os.Getpid()), worker: int32(worker), cgroup: cgroup, tree: tree}}
	if spec.Grace > 0 {
		s.grace = time.Duration(spec.Grace * float64(time.Second))
	}
	s.defaultGrace = s.grace
	requests := make(chan []string)
	go runner.ReadRequests(ours, requests)
	var answers bytes.Buffer
	// SIGCHLDs can merge; a slow tick makes sure none is missed.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSample := time.Now()
	// memoryTick runs while a task's memory request is known (VerbMemory).
	var memoryTicker *time.Ticker
	var memoryTick <-chan time.Time
	defer func() {
		if memoryTicker != nil {
			memoryTicker.Stop()
		}
	}()
	// killWorker fires StopWithin after the first SIGTERM or SIGINT.
	var killTimer *time.Timer
	var killWorker <-chan time.Time
	var killWithin time.Duration
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	for s.workerStatus == nil {
		switch {
		case memoryTick == nil && s.usage.limit > 0:
			memoryTicker = time.NewTicker(memoryEvery)
			memoryTick = memoryTicker.C
		case memoryTick != nil && s.usage.limit <= 0:
			memoryTicker.Stop()
			memoryTicker, memoryTick = nil, nil
		}
		select {
		case <-memoryTick:
			s.enforceMemory(context.Background())
		case <-tick.C:
			s.reap()
			if time.Since(lastSample) >= sampleEvery-sampleEvery/4 {
				s.usage.sample(context.Background())
				lastSample = time.Now()
			}
		case sig := <-sigs:
			if sig == syscall.SIGCHLD {
				s.reap()
				continue
			}
			// Asked to stop (a node signals the whole group, so the worker
			// has this too; an operator may signal only this process), or
			// for live output (sent to this process only).
			syscall.Kill(worker, sig.(syscall.Signal))
			if (sig == syscall.SIGTERM || sig == syscall.SIGINT) && killTimer == nil {
				killWithin = runner.StopWithin(s.grace)
				killTimer = time.NewTimer(killWithin)
				killWorker = killTimer.C
			}
		case <-killWorker:
			killWorker = nil
			s.log.Warn("the task runner worker did not stop in time after it was asked to; killing it and stopping what its run left",
				zap.Duration("within", killWithin))
			syscall.Kill(worker, syscall.SIGKILL)
		case batch, ok := <-requests:
			if !ok {
				requests = nil // the worker closed its end; wait for it to exit
				continue
			}
			// The requests the worker sent together are answered
			// together: one write, one wake of the worker.
			answers.Reset()
			s.stoppedAll = false
			for _, req := range batch {
				s.handle(req, &answers)
			}
			if answers.Len() > 0 {
				ours.Write(answers.Bytes())
			}
		}
	}
	// The worker has exited; what is left is bounded (leftovers get their
	// grace, then SIGKILL) and must not be cut short: a SIGTERM now (a
	// node stopping its runners) stays caught, so that leftovers are still
	// stopped and the worker's exit code is still the supervisor's.
	n := s.stopAll(context.Background(), true)
	if n > 0 {
		s.log.Warn("stopped processes the task left behind after its runner exited", zap.Int("processes", n))
	}
	for _, dir := range []string{s.run.cgroup, s.run.pids, s.holding} {
		if dir == "" {
			continue
		}
		contain.KillCgroup(dir) // the worker is gone: what is left is the run's
		if err := contain.RemoveCgroup(dir, 10*time.Second); err != nil {
			s.log.Warn("cannot remove the run's cgroup", zap.Error(err))
		}
	}
	ws := *s.workerStatus
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled() && s.idling:
		s.base.Warn("task runner worker was killed between tasks", zap.String("signal", ws.Signal().String()))
		return 128 + int(ws.Signal())
	case ws.Signaled():
		s.log.Error("task runner worker was killed; the node rescues its task", zap.String("signal", ws.Signal().String()))
		return 128 + int(ws.Signal())
	}
	return 1
}

// onLockedThread runs fn on an OS thread locked to it, which stays alive
// (its goroutine waiting, locked) until release is closed, and returns
// once fn has.
func onLockedThread(release <-chan struct{}, fn func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fn()
		close(done)
		<-release
	}()
	<-done
}

type supervisor struct {
	// base is the logger; log adds the current run's task.
	base, log *zap.Logger
	worker    int
	root      string // the node's cgroup, under which runs get theirs; "": none
	// pidsRoot is the node's cgroup v1 pids directory, under which each
	// run's programs get a cgroup with pids.max set; "": none.
	// pidsBroken is set once that failed (logged once).
	pidsRoot   string
	pidsBroken bool
	// maxProcesses is the node's process limit for runs (0: none), at
	// which begin makes each run's pids cgroup.
	maxProcesses int
	run          runState
	proof        *os.File // the run proof (contain.HoldProof) of run, or of none; nil: no proofs here
	runs         int      // runs begun
	// id names this supervisor's holding cgroup (holding, "" until used),
	// where the worker waits between runs, outside any run's cgroup.
	id, holding string
	// broken is set when the supervisor cannot mark the end of a run: it
	// begins no other.
	broken       bool
	idling       bool // between runs: the last one ended ("idle"), no other begun
	defaultGrace time.Duration
	grace        time.Duration
	workerStatus *syscall.WaitStatus
	usage        *sampler
	// stoppedAll is set by a stop that found no process of the run but
	// the worker, until the next request (of the same batch).
	stoppedAll bool
	// tree walks the run's processes, keeping the supervisor's and the
	// worker's /proc files open.
	tree *contain.Tree
}

// runState is the run the supervisor serves: its task, token, cgroup
// and pids cgroup ("": none); begun once the worker has begun it.
type runState struct {
	task, token, cgroup, pids string
	begun                     bool
}

// reap collects every child that has exited: the worker (whose status it
// keeps) and any process of the run re-parented here.
func (s *supervisor) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if pid == s.worker {
			s.workerStatus = &ws
			s.tree.Forget(int32(pid))
		}
	}
}

// handle answers one request of the worker (den/runner/control.go) into reply.
func (s *supervisor) handle(req string, reply io.Writer) {
	answer := func(verb string, arg any) { fmt.Fprintf(reply, "%s %v\n", verb, arg) }
	verb, arg, _ := strings.Cut(req, " ")
	// A usage asked with the stop before it (link.stopThenUsage), when
	// the stop found nothing: the tree is the worker alone.
	alone := s.stoppedAll
	s.stoppedAll = false
	switch verb {
	case runner.VerbUsage:
		b, err := json.Marshal(s.usage.measure(context.Background(), s.runs <= 1, alone))
		if err != nil { // cannot happen: numbers only
			b = []byte("{}")
		}
		answer(runner.VerbUsage, string(b))
		return
	case runner.VerbBegin:
		token, err := s.begin(arg)
		if err != nil {
			s.log.Error("cannot begin a run", zap.String("task", arg), zap.Error(err))
			answer(runner.VerbRefused, err)
			return
		}
		// The run's pids cgroup at the node's process limit, made now:
		// a run whose limit is the node's asks nothing more.
		dir := runner.NoPids
		if s.maxProcesses > 0 {
			if d := s.limitProcesses(s.maxProcesses); d != "" {
				dir = d
			}
		}
		answer(runner.VerbRun, token+" "+dir)
		return
	case runner.VerbIdle:
		answer(runner.VerbIdle, s.idle())
		return
	case runner.VerbProcs:
		dir := runner.NoPids
		if n, err := strconv.Atoi(arg); err == nil && n > 0 {
			if d := s.limitProcesses(n); d != "" {
				dir = d
			}
		}
		answer(runner.VerbProcs, dir)
		return
	}
	n, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || n < 0 {
		s.log.Warn("bad request from the task runner worker", zap.String("request", req))
		return
	}
	switch verb {
	case runner.VerbMemory:
		s.usage.limit = n // bytes
	case runner.VerbGrace:
		s.grace = time.Duration(n) * time.Millisecond
	case runner.VerbStop:
		s.grace = time.Duration(n) * time.Millisecond
		stopped := s.stopAll(context.Background(), false)
		s.stoppedAll = stopped == 0
		answer(runner.VerbStopped, stopped)
	default:
		s.log.Warn("bad request from the task runner worker", zap.String("request", req))
	}
}

// leftovers lists every process of the run but the worker: the
// supervisor's descendants, and the members of the run's cgroup.
//
// The worker's own children count: when the run is over, any still there
// are programs a plugin abandoned, and they must not live on into the
// runner's next run.
func (s *supervisor) leftovers(ctx context.Context) []int32 {
	var pids []int32
	for _, p := range s.tree.Descendants(ctx, int32(os.Getpid())) {
		if p != int32(s.worker) {
			pids = append(pids, p)
		}
	}
	if s.run.cgroup != "" || s.run.pids != "" {
		seen := map[int32]bool{}
		for _, p := range pids {
			seen[p] = true
		}
		for _, p := range slices.Concat(contain.CgroupProcs(s.run.cgroup), contain.CgroupProcs(s.run.pids)) {
			if p != int32(s.worker) && !seen[p] && !s.isZombie(p) {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// stopAll stops every process of the run but the worker. With workerGone
// the cgroup is killed as a whole at the end.
func (s *supervisor) stopAll(ctx context.Context, workerGone bool) int {
	find := func() []int32 { return s.leftovers(ctx) }
	n := contain.Stop(ctx, find, s.grace, s.reap)
	if workerGone && s.run.cgroup != "" {
		contain.KillCgroup(s.run.cgroup)
	}
	s.reap()
	return n
}

func (s *supervisor) isZombie(pid int32) bool {
	st, ok := s.tree.ReadStat(pid)
	return !ok || st.State == 'Z'
}

// limitProcesses gives the current run's programs a pids cgroup with
// pids.max n, where the node has a pids hierarchy for runs, and returns
// its directory; "" when there is none (RLIMIT_NPROC holds the limit
// then). The worker is not in it: its threads never compete with the
// task's, and a task at its limit never stops den from recording it.
func (s *supervisor) limitProcesses(n int) string {
	if s.pidsRoot == "" || s.pidsBroken {
		return ""
	}
	dir := contain.RunCgroup(s.pidsRoot, s.run.task, s.run.token)
	if err := contain.LimitPids(dir, n); err != nil {
		s.log.Warn("cannot give runs a pids cgroup; RLIMIT_NPROC holds their process limit from now on", zap.Error(err))
		s.pidsBroken = true
		contain.RemoveCgroup(dir, time.Second)
		return ""
	}
	s.run.pids = dir
	return dir
}

// processStart is a process's start time in milliseconds since the epoch,
// as the node checks it.
func processStart(pid int) (int64, error) {
	p, err := process.NewProcess(int32(pid))
	if err != nil {
		return 0, err
	}
	return p.CreateTime()
}

// begin starts a run of task (hex): the one prepared at start, the first
// time, else a new one with its own token, run proof and cgroup (the
// worker is moved into it from its holding cgroup), measured from zero.
func (s *supervisor) begin(task string) (string, error) {
	if _, err := bson.ObjectIDFromHex(task); err != nil {
		return "", fmt.Errorf("task id %q: %w", task, err)
	}
	if !s.run.begun && s.run.task == task {
		s.runs++
		s.run.begun = true
		s.idling = false
		return s.run.token, nil
	}
	if s.broken || s.proof == nil {
		return "", errors.New("this runner serves no other task")
	}
	token := bson.NewObjectID().Hex()
	proof, err := contain.HoldProof(contain.Marker(task, token))
	if err != nil {
		return "", err
	}
	s.proof.Close() // after the new one exists: the runner always holds one
	s.proof = proof
	s.runs++
	s.log = s.base.With(zap.String("task_id", task))
	next := runState{task: task, token: token, begun: true}
	if s.root != "" {
		next.cgroup = contain.RunCgroup(s.root, task, token)
		if err := contain.MoveToCgroup(next.cgroup, s.worker); err != nil {
			s.log.Warn("cannot move the runner into the run's cgroup; containing it by process tree only", zap.Error(err))
			contain.RemoveCgroup(next.cgroup, time.Second)
			next.cgroup = ""
		}
	}
	s.run = next
	s.idling = false
	s.grace = s.defaultGrace
	// The CPU counted before this run, to be subtracted. A run with a
	// cgroup is measured by its cpu.stat, and this base is only that
	// reading's fallback: the worker's own (between runs it is the tree:
	// idle found nothing else), without walking the tree.
	var base cpuTimes
	if next.cgroup != "" {
		base = s.usage.workerCPU()
	} else {
		base = s.usage.cpu(context.Background())
	}
	s.usage = &sampler{me: int32(os.Getpid()), worker: int32(s.worker), cgroup: next.cgroup, base: base, tree: s.tree}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		s.usage.maxRSSBefore = ru.Maxrss
	}
	return token, nil
}

// idle ends a run whose result is recorded: the run proof now proves no
// run, the task's memory request no longer holds, and the worker waits in
// a holding cgroup while the run's is removed. It returns how many of the
// run's processes are still there (stuck in the kernel past "stop"); with
// any, or when the proof cannot be swapped, the runner must take no other
// task.
func (s *supervisor) idle() int {
	s.usage.limit = 0
	s.idling = true
	left := len(s.leftovers(context.Background()))
	if s.proof == nil || s.broken {
		return max(left, 1)
	}
	proof, err := contain.HoldProof("")
	if err != nil {
		s.log.Warn("cannot mark the runner idle; it takes no other task", zap.Error(err))
		s.broken = true
		return max(left, 1)
	}
	s.proof.Close()
	s.proof = proof
	if s.run.pids != "" && left == 0 {
		if err := contain.RemoveCgroup(s.run.pids, 5*time.Second); err != nil {
			s.log.Warn("cannot remove the run's pids cgroup", zap.Error(err))
		}
		s.run.pids = ""
	}
	if s.run.cgroup != "" && left == 0 {
		move := contain.MoveInto // the holding cgroup exists after the first idle
		if s.holding == "" {
			s.holding, move = contain.HoldingCgroup(s.root, s.id), contain.MoveToCgroup
		}
		if err := move(s.holding, s.worker); err != nil {
			s.log.Warn("cannot move the runner out of the run's cgroup; it takes no other task", zap.Error(err))
			s.broken = true
			return 1
		}
		if err := contain.RemoveCgroup(s.run.cgroup, 5*time.Second); err != nil {
			s.log.Warn("cannot remove the run's cgroup", zap.Error(err))
		}
		s.run.cgroup = ""
	}
	return left
}
