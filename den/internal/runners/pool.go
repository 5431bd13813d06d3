package runners

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// RunnerCommand is how a node starts a task runner: Path with Args, with
// the node's environment plus Env plus the runner's spec (runner.SpecEnv).
// The default is this very binary with the hidden subcommand "task-runner".
type Command struct {
	Path string
	Args []string
	Env  []string
	// Log is the file runners append their log to; empty means the node's
	// own stderr (under systemd, the journal).
	Log string
	// LogJSON makes runners log JSON lines.
	LogJSON bool
	// MaxTasks is how many tasks of its queue one runner may run, one
	// after another, each handed over its task channel; 1 starts a runner per task, as
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

func (c *Command) Check() error {
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

// Params is what the pool reads of the configuration: what it hands
// each runner in its spec, and how it starts and keeps them.
type Params struct {
	Name, URI, Database string
	DeadNodeAfter       time.Duration
	MaxTermination      time.Duration
	MaxOutput           int64
	PluginConfig        map[string]json.RawMessage
	Runner              Command
}

// Pool is the only part of a node that deals with task runner
// processes. It starts them, each in a session of its own, and hands each
// a claimed task, or hands the task to an idle runner of its queue over
// that runner's task channel, so that a busy queue does not start two
// processes per task (RunnerCommand.MaxTasks and Idle; den/runner/worker/tasks.go
// is the runner's side). It listens to what they say (done, ready, and
// their end-of-task reports), reaps them, signals them (cancel, live
// output, kill) after proving who they are, and stops what a dead run
// left behind.
//
// Each runner this node process started is in its procTable: under one
// lock, the table knows which task each runs. Every act on the runner of a task
// goes through act, which acts only on the runner that runs that task now,
// so that nothing meant for a task can reach the next task of the same
// runner. Runners of an earlier node process are not in the table: their
// task channel closed with that process, so they take no other task, and
// act signals them after proving them (isRunnerOf).
type Pool struct {
	*base.Env
	params Params
	// procs holds the runner processes this process started and has not
	// reaped; running counts them.
	procs   *procTable
	running atomic.Int64
	// relay serves runners their MongoDB connections; nil when runners
	// connect directly (Runner.Direct).
	relay *relay.Relay
	// cgroup is the delegated cgroup v2 directory runs get cgroups under;
	// empty when runs are contained by their process tree only.
	cgroup string
	// pids is the cgroup v1 pids directory runs' programs get cgroups
	// under; empty when RLIMIT_NPROC holds their process limit.
	pids string

	// cancelling maps the run token of each cancelled task whose runner
	// was sent SIGTERM to when it gets SIGKILL.
	cancelMu   sync.Mutex
	cancelling map[bson.ObjectID]time.Time
	// liveAsked maps the run token of each running task a reader wants live
	// output of to when its runner was last asked (passes only).
	liveAsked map[bson.ObjectID]time.Time
	// stopping holds the run tokens whose leftovers are being stopped, so
	// that two rescue passes do not do it at once.
	stopMu   sync.Mutex
	stopping map[bson.ObjectID]bool

	// Slots, Rescuer and Stats are the components the pool tells what its
	// runners did; the node sets them once, before it runs (they are made
	// after the pool, since they call on it). Slots is told when a runner
	// is done with its task, and whether runners start their tasks (the
	// claimer); Rescuer rescues a task whose runner died while running
	// it; Stats counts completions for the status page's charts.
	Slots   Slots
	Rescuer Rescuer
	Stats   Stats
	// queues are the queues of the last full pass's read of every queue:
	// a runner's reports are counted under its queue's name there.
	queues Queues
}

// Stats counts completions for the status page's charts: each task
// handed to a runner, and each end a runner reports.
type Stats interface {
	Handed(task bson.ObjectID, at time.Time)
	Ended(queue bson.ObjectID, name string, r runner.Report, at time.Time)
}

// Queues names a queue by its _id, as the last read of every queue has
// it (fallback when that read had no such queue).
type Queues interface {
	Name(id bson.ObjectID, fallback string) string
}

// Rescuer rescues a task whose runner died while running it (the
// rescuer), and returns the task's new status.
type Rescuer interface {
	Rescue(ctx context.Context, task queue.Task, why queue.Outcome) int
}

// Slots is what the pool tells the part of the node that claims.
type Slots interface {
	// LetGo frees the slot of a task whose runner is done with it (its
	// result recorded and its processes stopped, or the task put back),
	// and claims again at once.
	LetGo(task bson.ObjectID)
	// PutBackLater says that a claimed task could not be put back (MongoDB
	// did not answer): the claimer tries again each pass.
	PutBackLater(task bson.ObjectID, why string)
	// RunnerStarted says that a runner started its task, or ended
	// cleanly: claims go on at full pace.
	RunnerStarted()
	// RunnerStartFailed says that a runner exited before starting task
	// (exit: how it exited): claims pause, with a growing backoff.
	RunnerStartFailed(task bson.ObjectID, exit string)
}

func New(e *base.Env, params Params, relay *relay.Relay, cgroup, pids string, queues Queues) *Pool {
	return &Pool{
		Env: e, params: params, procs: newProcTable(), relay: relay, cgroup: cgroup, pids: pids, queues: queues,
		cancelling: map[bson.ObjectID]time.Time{},
		liveAsked:  map[bson.ObjectID]time.Time{},
		stopping:   map[bson.ObjectID]bool{},
	}
}

// runnerProc is one runner process (its supervisor) this node started.
type runnerProc struct {
	pid   int
	queue bson.ObjectID
	ch    *os.File      // the node's end of its task channel; nil: one task only
	ready bool          // the runner said it serves ch
	task  bson.ObjectID // the task it runs; zero between tasks
	// served counts the tasks handed to it; idleAt is when it last became
	// idle; closed is set once ch is closed (it takes no more tasks).
	served int
	idleAt time.Time
	closed bool
}

// procTable is the node's runner processes, by pid, and the idle ones by
// queue (the most recently idle last).
type procTable struct {
	mu      sync.Mutex
	byPID   map[int]*runnerProc
	idle    map[bson.ObjectID][]*runnerProc
	stopped bool // the node stops: no more hand-overs
	// released is set once the node has stopped: the runners still
	// running are on their own (a later node rescues what they leave),
	// and their watchers only reap them.
	released bool
}

func newProcTable() *procTable {
	return &procTable{byPID: map[int]*runnerProc{}, idle: map[bson.ObjectID][]*runnerProc{}}
}

// retireLocked closes p's task channel: it takes no more tasks and exits
// once it has none.
func (p *runnerProc) retireLocked() {
	if p.ch != nil && !p.closed {
		p.closed = true
		p.ch.Close()
	}
}

// removeIdleLocked takes p off its queue's idle list.
func (pool *procTable) removeIdleLocked(p *runnerProc) {
	list := pool.idle[p.queue]
	for i, q := range list {
		if q == p {
			pool.idle[p.queue] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(pool.idle[p.queue]) == 0 {
		delete(pool.idle, p.queue)
	}
}

// release lets go of the runners still running, as the node's Run
// returns: their watchers reap them and do nothing else.
func (rs *Pool) Release() {
	rs.procs.mu.Lock()
	defer rs.procs.mu.Unlock()
	rs.procs.released = true
}

// pids lists the runner processes this node started that have not exited.
func (pool *procTable) pids() []int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	out := make([]int, 0, len(pool.byPID))
	for pid := range pool.byPID {
		out = append(out, pid)
	}
	return out
}

// heldFor is how long after its last beat runner r may still run task's
// processes (runner.HeldFor): on this host only dead_node_after, since a
// rescue here kills a hung runner and what its run left first; on
// another host, where nothing can be signalled, as long as its runner
// may take to stop them.
func (rs *Pool) HeldFor(task queue.Task, q *queue.Queue, r queue.RunnerInfo) time.Duration {
	if rs.OnThisHost(r) {
		return rs.params.DeadNodeAfter
	}
	return runner.HeldFor(rs.params.DeadNodeAfter, queue.BeatEvery(rs.params.DeadNodeAfter), rs.grace(task, q))
}

// start hands one claimed task to an idle runner of its queue, or starts a
// runner for it in a session of its own, so that signals to the node
// (Ctrl-C, systemctl stop) do not reach it and the node can stop, restart
// or be upgraded while it runs. The runner leads its own process group,
// which is what cancellation signals.
func (rs *Pool) Start(q queue.Queue, taskID bson.ObjectID, gfs string) error {
	spec := rs.spec(q, taskID, gfs)
	rs.Stats.Handed(taskID, rs.Now())
	if rs.HandOver(q.ID, taskID, spec) {
		return nil
	}
	cmd, files, err := rs.command(spec)
	if err != nil {
		return err
	}
	defer files.closeTheirs() // the child has its own copies
	if err := cmd.Start(); err != nil {
		files.closeOurs()
		rs.Metrics.RunnerStartFailures.WithLabelValues("exec").Inc()
		return fmt.Errorf("start %s: %w", rs.params.Runner.Path, err)
	}
	rs.Metrics.RunnerStarts.Inc()
	rs.track(cmd, q, taskID, spec.Reuse, files)
	return nil
}

// spec is the spec of the run of task taskID of queue q, with gfs its
// output's place (runner.Spec), as its runner gets it.
func (rs *Pool) spec(q queue.Queue, taskID bson.ObjectID, gfs string) runner.Spec {
	p := &rs.params
	spec := runner.Spec{
		URI: p.URI, Database: p.Database, Node: p.Name,
		Task: taskID.Hex(), Plugin: q.Plugin, GFS: gfs, LogJSON: p.Runner.LogJSON,
		Grace: p.MaxTermination.Seconds(), PluginConfig: p.PluginConfig[q.Plugin],
		Beat:   queue.BeatEvery(p.DeadNodeAfter).Seconds(),
		Cgroup: rs.cgroup, MaxOutput: p.MaxOutput, DeadNodeAfter: p.DeadNodeAfter.Seconds(),
		Pids: rs.pids, MaxProcesses: p.Runner.MaxProcesses, Reuse: p.Runner.MaxTasks > 1,
	}
	if server, mono := rs.Clock.Anchor(); !server.IsZero() {
		spec.ClockServer, spec.ClockMono = server, int64(mono)
	}
	if len(q.Raw) <= maxSpecQueue {
		spec.Queue = q.Raw
	}
	return spec
}

// runnerFiles are the files a new runner is started with: the node's
// ends of its relay control (nil: no relay) and of its task channel, and
// the runner's own (theirs), which the node closes once the runner has
// its copies.
type runnerFiles struct {
	relayCtl, tasks *os.File
	theirs          []*os.File
}

// closeTheirs closes the runner's ends.
func (f *runnerFiles) closeTheirs() {
	for _, t := range f.theirs {
		t.Close()
	}
}

// closeOurs closes the node's ends, when the runner did not start.
func (f *runnerFiles) closeOurs() {
	for _, o := range []*os.File{f.relayCtl, f.tasks} {
		if o != nil {
			o.Close()
		}
	}
}

// command is the command that starts a runner for spec, in a session of
// its own, with its log, its relay control (fd 3, unless runners connect
// directly) and its task channel; and the files it is started with.
func (rs *Pool) command(spec runner.Spec) (*exec.Cmd, *runnerFiles, error) {
	env, err := spec.Env()
	if err != nil {
		return nil, nil, err
	}
	files := &runnerFiles{}
	run := rs.params.Runner
	cmd := exec.Command(run.Path, run.Args...)
	cmd.Env = append(append(os.Environ(), run.Env...), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	if run.Log != "" {
		f, err := os.OpenFile(run.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("open runner log: %w", err)
		}
		files.theirs = append(files.theirs, f)
		cmd.Stderr = f
	}
	if rs.relay != nil {
		ours, theirs, err := relay.ControlPair()
		if err != nil {
			files.closeTheirs()
			return nil, nil, err
		}
		files.theirs = append(files.theirs, theirs)
		files.relayCtl = ours
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
		files.closeOurs()
		files.closeTheirs()
		return nil, nil, err
	}
	files.tasks = tasks
	files.theirs = append(files.theirs, theirs)
	cmd.ExtraFiles = append(cmd.ExtraFiles, theirs)
	cmd.Env = append(cmd.Env, runner.EnvTasksFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	return cmd, files, nil
}

// track takes a runner just started for task taskID of queue q into the
// pool: its relay served, what it says listened to (over its task
// channel, which reuse hands tasks over), and its exit watched.
func (rs *Pool) track(cmd *exec.Cmd, q queue.Queue, taskID bson.ObjectID, reuse bool, files *runnerFiles) {
	pid := cmd.Process.Pid
	if files.relayCtl != nil {
		// Served until the runner exits (closing its end) or the node
		// stops; then the runner connects directly.
		if err := rs.relay.ServeControl(files.relayCtl, rs.Log.With(zap.Int("runner_pid", pid))); err != nil {
			rs.Log.Warn("cannot serve a runner's relay; it connects to MongoDB directly", zap.String("task_id", taskID.Hex()), zap.Error(err))
		}
	}
	// The queue's name as the last pass read it: a reused runner may
	// serve a queue renamed since it started.
	report := func(r runner.Report) {
		name := rs.queues.Name(q.ID, q.Name)
		rs.receiveReport(name, r)
		rs.Stats.Ended(q.ID, name, r, rs.Now())
		if id, err := bson.ObjectIDFromHex(r.Task); err == nil {
			rs.Signals.NoteTaskEnded(base.TaskEnd{Task: id, Status: r.Status, Retry: r.Retry})
		}
	}
	rs.running.Add(1)
	p := &runnerProc{pid: pid, queue: q.ID, task: taskID, served: 1}
	if reuse {
		p.ch = files.tasks
	} else {
		// A runner of one task only reports on its channel.
		go func() {
			defer files.tasks.Close()
			runner.Listen(files.tasks, runner.Listener{Report: report})
		}()
	}
	rs.procs.mu.Lock()
	rs.procs.byPID[pid] = p
	if rs.procs.stopped {
		p.retireLocked()
	}
	rs.procs.mu.Unlock()
	rs.Log.Debug("task handed to a new runner", zap.String("task_id", taskID.Hex()), base.QueueField(q.Name), zap.Int("pid", pid))
	if p.ch != nil {
		go rs.listen(p, report)
	}
	go rs.watch(cmd, p)
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
// exits; once the node's Run has returned (release), it only reaps.
//
// A runner that serves several tasks says when each of its tasks is done; what it
// runs when it exits is the task handed to it last, if it has not said so
// of that one. One that exits cleanly without having said so (it was
// stopped) may have been handed a task it never started: that task is put
// back.
func (rs *Pool) watch(cmd *exec.Cmd, p *runnerProc) {
	err := cmd.Wait()
	pid := cmd.Process.Pid
	defer rs.Signals.NoteRunnerExited(pid) // once all below is done
	rs.procs.mu.Lock()
	taskID, reused := p.task, p.served > 1
	p.task = bson.ObjectID{}
	delete(rs.procs.byPID, pid)
	rs.procs.removeIdleLocked(p)
	p.retireLocked()
	released := rs.procs.released
	rs.procs.mu.Unlock()
	rs.running.Add(-1)
	if released {
		// The node is gone: neither its logger nor its slots are
		// there to tell, and what the runner left is a later node's
		// to rescue.
		return
	}
	if taskID.IsZero() {
		if err != nil {
			rs.Log.Debug("an idle task runner exited", zap.Int("pid", pid), zap.Error(err))
		}
		return
	}
	// Once the task is dealt with, its slot is free: claim at once.
	defer rs.Slots.LetGo(taskID)
	if err == nil {
		if p.ch != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ok, err := rs.Store.Release(ctx, taskID, rs.params.Name, rs.Now())
			switch {
			case err != nil:
				rs.Slots.PutBackLater(taskID, "its runner stopped before starting it")
			case ok:
				rs.Log.Warn("a task runner stopped before starting the task it was handed; task put back", zap.String("task_id", taskID.Hex()), zap.Int("pid", pid))
			}
		}
		rs.Slots.RunnerStarted()
		return
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		rs.Log.Warn("lost track of a task runner", zap.String("task_id", taskID.Hex()), zap.Error(err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, rerr := rs.Store.Release(ctx, taskID, rs.params.Name, rs.Now())
	if rerr != nil {
		// Claimed or running, it cannot be told now: put back if it is
		// still claimed when MongoDB answers; if it was running, the
		// rescue of dead runners finds it.
		rs.Slots.PutBackLater(taskID, "its runner died ("+exit.String()+")")
		return
	}
	if ok && reused {
		// A runner that served tasks before: not a broken setup, and the
		// next task gets a new runner.
		rs.Log.Warn("a task runner died before starting the task handed to it; task put back", zap.String("task_id", taskID.Hex()), zap.Int("pid", pid), zap.String("exit", exit.String()))
		return
	} else if ok {
		rs.Metrics.RunnerStartFailures.WithLabelValues("exited").Inc()
		rs.Slots.RunnerStartFailed(taskID, exit.String())
		return
	}
	task, err := rs.Store.Task(ctx, taskID)
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
		rs.Rescuer.Rescue(rctx, *task, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("task runner (pid %d) died: %s", pid, exit)})
	}
}

// drain waits up to wait for the runners this process started to finish,
// then sends SIGTERM to the groups of those still running and waits for
// them to record their tasks (their grace, max_termination_time, plus
// slack). See Config.DrainOnStop.
func (rs *Pool) Drain(wait time.Duration) {
	left := rs.procs.pids
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
	rs.Log.Info("waiting for running tasks to finish before the database stops", zap.Int("runners", len(pids)), zap.Duration("at_most", wait))
	if until(wait) {
		return
	}
	pids = left()
	rs.Log.Warn("stopping the tasks still running (SIGTERM to their runners)", zap.Int("runners", len(pids)))
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGTERM)
	}
	if !until(rs.params.MaxTermination + 15*time.Second) {
		rs.Log.Warn("task runners did not stop in time", zap.Int("runners", len(left())))
	}
}
func (rs *Pool) HandOver(queueID, task bson.ObjectID, spec runner.Spec) bool {
	pool := rs.procs
	pool.mu.Lock()
	defer pool.mu.Unlock()
	for !pool.stopped {
		list := pool.idle[queueID]
		if len(list) == 0 {
			return false
		}
		p := list[len(list)-1] // the warmest
		pool.removeIdleLocked(p)
		if err := runner.Send(p.ch, runner.RunTask{Spec: spec}); err != nil {
			rs.Log.Debug("an idle task runner cannot take a task; retiring it", zap.Int("pid", p.pid), zap.Error(err))
			p.retireLocked()
			continue
		}
		p.task = task
		p.served++
		rs.Metrics.RunnerReuses.Inc()
		rs.Log.Debug("task handed to an idle runner", zap.String("task_id", task.Hex()), zap.Int("pid", p.pid), zap.Int("served", p.served))
		return true
	}
	return false
}

// listen takes what runner p says on its task channel until the channel
// closes: each report goes to report, and each "done" frees its task's
// slot and makes p idle (or retires it, after MaxTasks tasks or once the
// node stops).
func (rs *Pool) listen(p *runnerProc, report func(runner.Report)) {
	runner.Listen(p.ch, runner.Listener{Report: report, Ready: func() {
		rs.procs.mu.Lock()
		p.ready = true
		rs.procs.mu.Unlock()
	}, Done: func(task string) {
		id, err := bson.ObjectIDFromHex(task)
		if err != nil {
			return
		}
		rs.procs.mu.Lock()
		if p.task != id {
			rs.procs.mu.Unlock()
			return
		}
		p.task = bson.ObjectID{}
		if p.served >= rs.params.Runner.MaxTasks || rs.procs.stopped || p.closed {
			p.retireLocked()
		} else {
			p.idleAt = rs.Now()
			rs.procs.idle[p.queue] = append(rs.procs.idle[p.queue], p)
		}
		rs.procs.mu.Unlock()
		rs.Slots.RunnerStarted()
		rs.Slots.LetGo(id)
	}})
}

// receiveReport counts what a runner of a task of queue q reported at its
// end, on its task channel: its completion or retry, and its output bytes.
func (rs *Pool) receiveReport(q string, r runner.Report) {
	q = rs.Metrics.Queue(q)
	switch {
	case r.Retry:
		rs.Metrics.Retries.WithLabelValues(q).Inc()
	case r.Status != 0:
		rs.Metrics.Completions.WithLabelValues(q, strconv.Itoa(r.Status), queue.StatusName(r.Status)).Inc()
	}
	rs.Metrics.OutputBytes.WithLabelValues(q, "stdout").Add(float64(max(r.Stdout, 0)))
	rs.Metrics.OutputBytes.WithLabelValues(q, "stderr").Add(float64(max(r.Stderr, 0)))
	if r.Outcome != "" && r.Status != 0 {
		rs.Metrics.RunSeconds.WithLabelValues(q, runOutcome(r)).Observe(max(r.Run, 0))
		rs.Metrics.WaitSeconds.WithLabelValues(q).Observe(max(r.Wait, 0))
	}
}

// runOutcome is a reported run's outcome label: succeeded, or who decided
// the end of a run that did not succeed (one of queue's outcome kinds).
func runOutcome(r runner.Report) string {
	switch {
	case r.Status == queue.StatusSucceeded:
		return "succeeded"
	case slices.Contains(queue.Outcomes, r.Outcome):
		return r.Outcome
	}
	return "other"
}

// retireIdle retires the runners idle for longer than Runner.Idle, or all
// idle ones (and stops hand-overs) once the node stops.
func (rs *Pool) RetireIdle(stopping bool) {
	pool := rs.procs
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if stopping {
		pool.stopped = true
	}
	now := rs.Now()
	for _, list := range pool.idle {
		for _, p := range list {
			if stopping || now.Sub(p.idleAt) >= rs.params.Runner.Idle {
				p.retireLocked()
				pool.removeIdleLocked(p)
			}
		}
	}
}

// count is how many runner processes this process started are still
// running.
func (rs *Pool) Count() int64 { return rs.running.Load() }

// closeRelay stops serving runners their MongoDB connections, as the node
// stops: runners still running switch to their own.
func (rs *Pool) CloseRelay() {
	if rs.relay != nil {
		rs.relay.Close()
	}
}
