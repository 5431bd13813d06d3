package den

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// RunnerCommand is how a node starts a task runner: Path with Args, with
// the node's environment plus Env plus the runner's spec (runner.SpecEnv).
// The default is this very binary with the hidden subcommand "task-runner".
type RunnerCommand struct {
	Path string
	Args []string
	Env  []string
	// Log is the file runners append their log to; empty means the node's
	// own stderr (under systemd, the journal).
	Log string
	// LogJSON makes runners log JSON lines.
	LogJSON bool
	// MaxTasks is how many tasks of its queue one runner may run, one
	// after another (see reuse.go); 1 starts a runner per task, as
	// Disbatch does. Default DefaultRunnerMaxTasks.
	MaxTasks int
	// Idle is how long a runner waits for its queue's next task before
	// the node retires it. Default DefaultRunnerIdle.
	Idle time.Duration
	// MaxProcesses is the most processes, threads included, a task's
	// programs may have at once (runner.max_processes); a task's or its
	// queue's max_processes may lower it, never raise it. Default
	// DefaultRunnerMaxProcesses. Enforced by pids.max where the node has a
	// pids cgroup for runs, else by RLIMIT_NPROC (see den/sandbox).
	MaxProcesses int
	// Direct makes runners connect to MongoDB themselves (URI), as
	// Disbatch's do. By default (false) they reach it through the node's
	// relay, on the node's own connections: a task then opens no server
	// connection (no handshake, TLS or authentication round trips, no
	// endSessions). See package den/internal/relay.
	Direct bool
}

func (c *RunnerCommand) check() error {
	if c.Path != "" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to start task runners: %w", err)
	}
	c.Path, c.Args = exe, []string{"task-runner"}
	return nil
}

// maxSpecQueue is the largest queue document handed to a runner in its
// spec; a larger one (an environment string may not pass 128 KiB) the
// runner reads itself.
const maxSpecQueue = 32 << 10

// spawn hands one claimed task to an idle runner of its queue, or starts a
// runner for it in a session of its own, so that signals to the node
// (Ctrl-C, systemctl stop) do not reach it and the node can stop, restart
// or be upgraded while it runs. The runner leads its own process group,
// which is what cancellation signals.
func (n *Node) spawn(q queue.Queue, taskID bson.ObjectID, gfs string) error {
	spec := runner.Spec{
		URI: n.cfg.URI, Database: n.cfg.Database, Node: n.cfg.Name,
		Task: taskID.Hex(), Plugin: q.Plugin, GFS: gfs, LogJSON: n.cfg.Runner.LogJSON,
		Grace: n.cfg.MaxTermination.Seconds(), PluginConfig: n.cfg.PluginConfig[q.Plugin],
		Beat:   min(max(n.cfg.DeadNodeAfter/5, time.Second), time.Minute).Seconds(),
		Cgroup: n.cgroup, MaxOutput: n.cfg.MaxOutput, DeadNodeAfter: n.cfg.DeadNodeAfter.Seconds(),
		Pids: n.pids, MaxProcesses: n.cfg.Runner.MaxProcesses, Reuse: n.cfg.Runner.MaxTasks > 1,
	}
	if len(q.Raw) <= maxSpecQueue {
		spec.Queue = q.Raw
	}
	if n.handOver(q.ID, taskID, spec) {
		return nil
	}
	env, err := spec.Env()
	if err != nil {
		return err
	}
	cmd := exec.Command(n.cfg.Runner.Path, n.cfg.Runner.Args...)
	cmd.Env = append(append(os.Environ(), n.cfg.Runner.Env...), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	if n.cfg.Runner.Log != "" {
		f, err := os.OpenFile(n.cfg.Runner.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("open runner log: %w", err)
		}
		defer f.Close() // the child has its own copy
		cmd.Stderr = f
	}
	var relayCtl *os.File
	if n.relay != nil {
		ours, theirs, err := relay.ControlPair()
		if err != nil {
			return err
		}
		defer theirs.Close() // the child has its own copy
		relayCtl = ours
		cmd.ExtraFiles = []*os.File{theirs} // fd 3 in the runner
		cmd.Env = append(cmd.Env, runner.EnvRelayFD+"=3")
	} else {
		cmd.Env = append(cmd.Env, runner.EnvRelayFD+"=") // none, whatever the node inherited
	}
	// Every runner gets a task channel: what it says (its reports) comes
	// over it, relay or not; only one that may be reused (spec.Reuse) is
	// handed tasks over it.
	tasks, theirs, err := runner.TaskChannel()
	if err != nil {
		if relayCtl != nil {
			relayCtl.Close()
		}
		return err
	}
	defer theirs.Close() // the child has its own copy
	cmd.ExtraFiles = append(cmd.ExtraFiles, theirs)
	cmd.Env = append(cmd.Env, runner.EnvTasksFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{relayCtl, tasks} {
			if f != nil {
				f.Close()
			}
		}
		n.metrics.RunnerStartFailures.WithLabelValues("exec").Inc()
		return fmt.Errorf("start %s: %w", n.cfg.Runner.Path, err)
	}
	n.metrics.RunnerStarts.Inc()
	pid := cmd.Process.Pid
	if relayCtl != nil {
		// Served until the runner exits (closing its end) or the node
		// stops; then the runner connects directly.
		if err := n.relay.ServeControl(relayCtl, n.log.With(zap.Int("runner_pid", pid))); err != nil {
			n.log.Warn("cannot serve a runner's relay; it connects to MongoDB directly", zap.String("task_id", taskID.Hex()), zap.Error(err))
		}
	}
	// The queue's name as the last pass read it: a reused runner may
	// serve a queue renamed since it started.
	report := func(r runner.Report) { n.runnerReport(n.queueName(q.ID, q.Name), r) }
	n.runners.Add(1)
	p := &runnerProc{pid: pid, queue: q.ID, task: taskID, served: 1}
	if spec.Reuse {
		p.ch = tasks
	} else {
		// A runner of one task only reports on its channel.
		go func() {
			defer tasks.Close()
			runner.Listen(tasks, runner.Listener{Report: report})
		}()
	}
	n.pool.mu.Lock()
	n.pool.byPID[pid] = p
	if n.pool.stopped {
		p.retireLocked()
	}
	n.pool.mu.Unlock()
	n.log.Debug("task handed to a new runner", zap.String("task_id", taskID.Hex()), queueField(q.Name), zap.Int("pid", pid))
	if p.ch != nil {
		go n.listen(p, report)
	}
	go n.watch(cmd, p)
	return nil
}

// watch waits for a runner this process started (so it does not linger as a
// zombie) and then wakes the loop, so that a finished task frees its slot at
// once instead of at the next interval.
//
// A runner that failed before starting its task gets the task put back, and
// claiming pauses with a growing backoff, so that a broken runner setup
// (bad credentials, a missing binary) does not spin. A runner that died
// while running its task gets the task rescued (retried or orphaned). The
// goroutine lives exactly as long as the runner, or until the node process
// exits.
//
// A reused runner (reuse.go) says when each of its tasks is done; what it
// runs when it exits is the task handed to it last, if it has not said so
// of that one. One that exits cleanly without having said so (it was
// stopped) may have been handed a task it never started: that task is put
// back.
func (n *Node) watch(cmd *exec.Cmd, p *runnerProc) {
	err := cmd.Wait()
	pid := cmd.Process.Pid
	n.pool.mu.Lock()
	taskID, reused := p.task, p.served > 1
	p.task = bson.ObjectID{}
	delete(n.pool.byPID, pid)
	n.pool.removeIdleLocked(p)
	p.retireLocked()
	n.pool.mu.Unlock()
	n.runners.Add(-1)
	if taskID.IsZero() {
		if err != nil {
			n.log.Debug("an idle task runner exited", zap.Int("pid", pid), zap.Error(err))
		}
		return
	}
	// Once the task is dealt with, its slot is free: claim at once.
	defer n.wakeUp()
	defer func() { n.held.done(taskID, n.now()) }()
	if err == nil {
		if p.ch != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if ok, err := n.store.Release(ctx, taskID, n.cfg.Name, n.now()); err == nil && ok {
				n.log.Warn("a task runner stopped before starting the task it was handed; task put back", zap.String("task_id", taskID.Hex()), zap.Int("pid", pid))
			}
		}
		n.startFailures.Store(0)
		if n.notes.clear("runner-start") {
			n.log.Info("task runners start tasks again")
		}
		return
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		n.log.Warn("lost track of a task runner", zap.String("task_id", taskID.Hex()), zap.Error(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := n.store.Release(ctx, taskID, n.cfg.Name, n.now()); err == nil && ok && reused {
		// A runner that served tasks before: not a broken setup, and the
		// next task gets a new runner.
		n.log.Warn("a task runner died before starting the task handed to it; task put back", zap.String("task_id", taskID.Hex()), zap.Int("pid", pid), zap.String("exit", exit.String()))
		return
	} else if err == nil && ok {
		n.metrics.RunnerStartFailures.WithLabelValues("exited").Inc()
		failures := n.startFailures.Add(1)
		pause := min(time.Duration(1<<min(failures, 10))*100*time.Millisecond, time.Minute)
		n.pauseClaims(pause)
		if n.notes.set("runner-start", "") {
			n.log.Error("a task runner exited before starting its task; task put back, claiming paused with backoff (see the runner log)",
				zap.String("task_id", taskID.Hex()), zap.String("exit", exit.String()))
		}
		return
	}
	task, err := n.store.Task(ctx, taskID)
	if err != nil || task == nil {
		return
	}
	// Only a task its run left claimed or running: a runner that recorded
	// the result and then exited badly leaves the result as it is. The
	// rescue stops what the run left first, which takes the task's grace
	// and, on a loaded machine, a while to find them: a context of its
	// own, so that it is never cut short (a retry must not overlap).
	if r := task.Runner; r != nil && r.PID == pid && (task.Status == queue.StatusClaimed || task.Status == queue.StatusRunning) {
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer rcancel()
		n.rescue(rctx, *task, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("task runner (pid %d) died: %s", pid, exit)})
	}
}

// queueName is the name of queue id as the last full pass read it, else
// fallback.
func (n *Node) queueName(id bson.ObjectID, fallback string) string {
	if p := n.queueNames.Load(); p != nil {
		if name, ok := (*p)[id]; ok {
			return name
		}
	}
	return fallback
}

// runnerReport counts what a runner of a task of queue q reported at its
// end: its completion or retry, and its output bytes.
func (n *Node) runnerReport(q string, r runner.Report) {
	q = n.metrics.Queue(q)
	switch {
	case r.Retry:
		n.metrics.Retries.WithLabelValues(q).Inc()
	case r.Status != 0:
		n.metrics.Completions.WithLabelValues(q, strconv.Itoa(r.Status)).Inc()
	}
	n.metrics.OutputBytes.WithLabelValues(q, "stdout").Add(float64(max(r.Stdout, 0)))
	n.metrics.OutputBytes.WithLabelValues(q, "stderr").Add(float64(max(r.Stderr, 0)))
}

func (n *Node) wakeUp() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *Node) pauseClaims(d time.Duration) {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	if until := n.now().Add(d); until.After(n.pausedUntil) {
		n.pausedUntil = until
	}
}

func (n *Node) claimsPaused() bool {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	return n.now().Before(n.pausedUntil)
}

// drain waits up to wait for the runners this process started to finish,
// then sends SIGTERM to the groups of those still running and waits for
// them to record their tasks (their grace, max_termination_time, plus
// slack). See Config.DrainOnStop.
func (n *Node) drain(wait time.Duration) {
	left := n.pool.pids
	until := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if len(left()) == 0 {
				return true
			}
		}
		return len(left()) == 0
	}
	pids := left()
	if len(pids) == 0 {
		return
	}
	n.log.Info("waiting for running tasks to finish before the database stops", zap.Int("runners", len(pids)), zap.Duration("at_most", wait))
	if until(wait) {
		return
	}
	pids = left()
	n.log.Warn("stopping the tasks still running (SIGTERM to their runners)", zap.Int("runners", len(pids)))
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGTERM)
	}
	if !until(n.cfg.MaxTermination + 15*time.Second) {
		n.log.Warn("task runners did not stop in time", zap.Int("runners", len(left())))
	}
}
