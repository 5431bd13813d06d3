package supervisor

import (
	"bytes"
	"context"
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

// Main runs the supervisor: it starts the worker, reaps every child
// it is given, answers the worker's requests, and once the worker has
// exited stops whatever is left and exits with the worker's code. Asked
// to stop (SIGTERM, SIGINT), it passes the signal on to the worker, which
// stops the run as a cancel does and records what it can; a worker that
// has not exited StopWithin the task's grace after that (hung, or
// stopped) is killed, and the rest stopped as for any dead worker. The
// relay control channel and the task channel, if any, go to the worker and
// to no other process; the supervisor keeps no copy.
func Main(spec runner.Spec, log *zap.Logger, relayCtl, tasksCh *os.File) int {
	inherited := []*os.File{relayCtl, tasksCh}
	for _, f := range inherited {
		if f != nil {
			defer f.Close() // also on the early returns below
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Error("cannot become a child subreaper; refusing to run the task uncontained", zap.Error(err))
		return 2
	}
	first := prepareFirstRun(&spec, log)
	if first.cgroupFD != nil {
		defer first.cgroupFD.Close()
	}
	ours, theirs, err := controlChannel()
	if err != nil {
		log.Error("create the worker's control socket", zap.Error(err))
		return 2
	}
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
	attr, err := workerAttr(spec, first, theirs, relayCtl, tasksCh)
	if err != nil {
		log.Error("hand the worker its spec", zap.Error(err))
		return 2
	}
	// The worker's PDEATHSIG fires when the thread that started it exits:
	// it is started from a thread that lives, locked, until the
	// supervisor returns.
	release := make(chan struct{})
	defer close(release)
	worker, err := startWorker(exe, attr, &first, release, log)
	syscall.Close(theirs)
	if err != nil {
		log.Error("start the task runner worker", zap.Error(err))
		return 2
	}
	for _, f := range inherited {
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
	s := newSupervisor(spec, log, worker, first, tree)
	s.serve(ours, sigs)
	return s.finish()
}

// firstRun is the run the supervisor prepares before the worker starts,
// so that the worker starts inside its cgroup; the worker begins it like
// any other.
type firstRun struct {
	token bson.ObjectID
	// proof is the run proof (contain.HoldProof); nil on a kernel without
	// memfd.
	proof *os.File
	// started is the supervisor's start time (processStart), 0 unknown.
	started int64
	// cgroup is the run's cgroup, "" none; cgroupFD its directory, which
	// the worker is started into.
	cgroup   string
	cgroupFD *os.File
}

// prepareFirstRun makes the first run's token, proof and cgroup. Without
// a proof it turns spec.Reuse off: the runner serves one task.
func prepareFirstRun(spec *runner.Spec, log *zap.Logger) firstRun {
	first := firstRun{token: bson.NewObjectID()}
	proof, err := contain.HoldProof(contain.Marker(spec.Task, first.token.Hex()))
	if err != nil {
		// A kernel without memfd (before 3.17). The node then proves this
		// runner by its spec, which names its one task: serve no other.
		log.Warn("no run proof on this kernel; this runner serves one task", zap.Error(err))
		spec.Reuse = false // the worker's spec
	}
	first.proof = proof
	if t, err := processStart(os.Getpid()); err == nil {
		first.started = t
	}
	if spec.Cgroup != "" {
		first.cgroup = contain.RunCgroup(spec.Cgroup, spec.Task, first.token.Hex())
		f, err := contain.CreateCgroup(first.cgroup)
		if err != nil {
			log.Warn("cannot create the run's cgroup; containing it by process tree only", zap.Error(err))
			first.cgroup = ""
		} else {
			first.cgroupFD = f
		}
	}
	return first
}

// controlChannel creates the control channel: the supervisor's end, and
// the worker's descriptor, which the worker inherits as runner.ControlFD.
func controlChannel() (ours *os.File, theirs int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, err
	}
	// Non-blocking, so that reading it waits in the runtime's poller and
	// not in a read(2) that holds a thread: a thread blocked in a system
	// call keeps the runtime's monitor polling (every 20 µs at first),
	// which cost more CPU than the supervisor's own work per task.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		return nil, -1, err
	}
	return os.NewFile(uintptr(fds[0]), "control"), fds[1], nil
}

// workerAttr is how the worker is started: its environment (its spec, and
// the variables that make it the worker and name its supervisor and
// descriptors), its descriptors, and its cgroup.
func workerAttr(spec runner.Spec, first firstRun, control int, relayCtl, tasksCh *os.File) (*syscall.ProcAttr, error) {
	// The worker's environment carries no run marker: the marker of each
	// run is set for the programs of that run only (worker.Executor.Run),
	// so that the worker is never taken for a leftover of a run it has
	// served.
	workerSpec, err := spec.Env()
	if err != nil {
		return nil, err
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, runner.SpecEnv+"=") })
	env = append(env, workerSpec, runner.EnvWorker+"=1", runner.EnvSupervisor+"="+strconv.Itoa(os.Getpid())+":"+strconv.FormatInt(first.started, 10))
	fdEnv, files := workerFiles(control, fdOf(relayCtl), fdOf(tasksCh))
	attr := &syscall.ProcAttr{
		Env:   append(env, fdEnv...),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if first.cgroupFD != nil {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, int(first.cgroupFD.Fd())
	}
	return attr, nil
}

// fdOf is f's descriptor, or -1 for none.
func fdOf(f *os.File) int {
	if f == nil {
		return -1
	}
	return int(f.Fd())
}

// workerFiles decides the worker's descriptors: stdin, stdout, stderr,
// the control channel as runner.ControlFD, then the relay's control
// channel and the task channel where there are any (relay, tasks -1:
// none), each named in the environment entries it returns.
func workerFiles(control, relay, tasks int) (env []string, files []uintptr) {
	files = []uintptr{0, 1, 2, uintptr(control)}
	if relay >= 0 {
		env = append(env, runner.EnvRelayFD+"="+strconv.Itoa(len(files)))
		files = append(files, uintptr(relay))
	}
	if tasks >= 0 {
		env = append(env, runner.EnvTasksFD+"="+strconv.Itoa(len(files)))
		files = append(files, uintptr(tasks))
	}
	return env, files
}

// startWorker starts the worker from a thread that stays locked until
// release is closed (onLockedThread), in the first run's cgroup when it
// has one; where that fails, outside it, and the first run has no cgroup.
func startWorker(exe string, attr *syscall.ProcAttr, first *firstRun, release <-chan struct{}, log *zap.Logger) (int, error) {
	var worker int
	var err error
	onLockedThread(release, func() {
		worker, err = syscall.ForkExec(exe, os.Args, attr)
		if err != nil && first.cgroupFD != nil {
			log.Warn("cannot start the worker inside the run's cgroup; containing it by process tree only", zap.Error(err))
			contain.RemoveCgroup(first.cgroup, time.Second)
			first.cgroup, attr.Sys.UseCgroupFD = "", false
			worker, err = syscall.ForkExec(exe, os.Args, attr)
		}
	})
	return worker, err
}

// onLockedThread runs fn on an OS thread locked to it, which stays alive
// (its goroutine waiting, locked) until release is closed, and returns
// once fn has. The supervisor's loop runs on any thread (a loop locked to
// its thread hands its work over to that thread each time it wakes: two
// more context switches per request of the worker).
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

// newSupervisor is the supervisor of the worker it started, serving the
// first run.
func newSupervisor(spec runner.Spec, log *zap.Logger, worker int, first firstRun, tree *contain.Tree) *supervisor {
	s := &supervisor{base: log, log: log.With(zap.String("task_id", spec.Task)), worker: worker, root: spec.Cgroup, pidsRoot: spec.Pids, grace: runner.DefaultGrace,
		maxProcesses: spec.MaxProcesses,
		id:           bson.NewObjectID().Hex(),
		run:          runState{task: spec.Task, token: first.token.Hex(), cgroup: first.cgroup},
		proof:        first.proof,
		tree:         tree,
		usage:        &sampler{me: int32(os.Getpid()), worker: int32(worker), cgroup: first.cgroup, tree: tree}}
	if spec.Grace > 0 {
		s.grace = time.Duration(spec.Grace * float64(time.Second))
	}
	s.defaultGrace = s.grace
	return s
}

// serve is the supervisor's loop, until the worker has exited: it reaps,
// samples the run's usage, enforces its memory request, passes signals
// on to the worker (and kills it when it does not stop in time), and
// answers the worker's requests, read from ours.
func (s *supervisor) serve(ours *os.File, sigs <-chan os.Signal) {
	requests := make(chan []string)
	go runner.ReadRequests(ours, requests)
	var answers bytes.Buffer
	// SIGCHLDs can merge; a slow tick makes sure none is missed.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSample := time.Now()
	// memory ticks while a task's memory request is known (VerbMemory).
	var memory ticker
	defer memory.stop()
	// kill fires StopWithin after the first SIGTERM or SIGINT.
	var kill killTimer
	defer kill.stop()
	for s.workerStatus == nil {
		if memoryTicks(s.usage.limit) != memory.running() {
			memory.toggle(memoryEvery)
		}
		select {
		case <-memory.c:
			s.enforceMemory(context.Background())
		case <-tick.C:
			s.reap()
			if sampleDue(time.Since(lastSample)) {
				s.usage.sample(context.Background())
				lastSample = time.Now()
			}
		case sig := <-sigs:
			s.onSignal(sig.(syscall.Signal), &kill)
		case <-kill.c:
			kill.c = nil
			s.log.Warn("the task runner worker did not stop in time after it was asked to; killing it and stopping what its run left",
				zap.Duration("within", kill.within))
			syscall.Kill(s.worker, syscall.SIGKILL)
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
}

// onSignal does what signalAction decides for sig: reap, or pass it on to
// the worker, arming kill at the first request to stop.
func (s *supervisor) onSignal(sig syscall.Signal, kill *killTimer) {
	act := signalAction(sig, kill.armed())
	if act.reap {
		s.reap()
	}
	if act.forward {
		// Asked to stop (a node signals the whole group, so the worker
		// has this too; an operator may signal only this process), or
		// for live output (sent to this process only).
		syscall.Kill(s.worker, sig)
	}
	if act.armKill {
		kill.arm(runner.StopWithin(s.grace))
	}
}

// finish, once the worker has exited, stops what is left of its run,
// removes the run's cgroups, and returns the supervisor's exit code.
func (s *supervisor) finish() int {
	// What is left is bounded (leftovers get their grace, then SIGKILL)
	// and must not be cut short: a SIGTERM now (a node stopping its
	// runners) stays caught, so that leftovers are still stopped and the
	// worker's exit code is still the supervisor's.
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
	code, end := exitOf(ws, s.idling)
	switch end {
	case killedIdle:
		s.base.Warn("task runner worker was killed between tasks", zap.String("signal", ws.Signal().String()))
	case killedRunning:
		s.log.Error("task runner worker was killed; the node rescues its task", zap.String("signal", ws.Signal().String()))
	}
	return code
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

// ticker is a time.Ticker that may be off: c is nil then, and a select
// on it waits for ever.
type ticker struct {
	t *time.Ticker
	c <-chan time.Time
}

func (t *ticker) running() bool { return t.t != nil }

// toggle starts the ticker, every every, or stops it.
func (t *ticker) toggle(every time.Duration) {
	if t.t == nil {
		t.t = time.NewTicker(every)
		t.c = t.t.C
		return
	}
	t.stop()
}

func (t *ticker) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.t, t.c = nil, nil
}

// killTimer fires once, within after it was armed; it is armed at most
// once. c is nil before it is armed and once it has fired.
type killTimer struct {
	t      *time.Timer
	c      <-chan time.Time
	within time.Duration
}

func (k *killTimer) armed() bool { return k.t != nil }

func (k *killTimer) arm(within time.Duration) {
	k.within = within
	k.t = time.NewTimer(within)
	k.c = k.t.C
}

func (k *killTimer) stop() {
	if k.t != nil {
		k.t.Stop()
	}
}
