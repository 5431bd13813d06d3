package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
)

// The supervisor's end of the control channel: its state between the
// worker's requests, its answers to them (handle), and what they make it
// do to a run: begin it, stop what it left, end it (idle).

// supervisor is the state of a supervisor process, from the worker's
// start to its exit.
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
		// Measured from here: the worker's start and its plugin's
		// preparation (plugins.Preparer) are den's, not the task's.
		s.usage.startNow(context.Background())
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
