package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/backoff"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Executor runs one task.
type Executor struct {
	Spec    runner.Spec
	DB      *mongo.Database
	Plugins *plugins.Registry
	Log     *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StartTimeout bounds how long the runner keeps trying to start its task
	// while MongoDB is unreachable; after that the node's orphan reaping
	// takes over. Default 5 minutes.
	StartTimeout time.Duration
	// Retry is the backoff of final writes, which are retried until they
	// land.
	Retry backoff.Policy
	// Report, when set, is told how the run ended once its outcome is
	// stored (for the node's metrics, over the task channel; it costs no
	// database command).
	Report func(runner.Report)
	// LiveRequests delivers the node's requests for live output (SIGUSR1,
	// sent while a reader wants the task's output as it is written; see
	// queue/live.go). Each one asks for live output for the next LiveFor.
	// Nil: never asked.
	LiveRequests <-chan os.Signal
	// NodeGone, when set, is closed once the node process that started
	// this runner has exited (its task channel closed): the run's final
	// writes are then given up once none has landed for GiveUpAfter
	// (giveup.go). Nil: the node is never taken for gone.
	NodeGone <-chan struct{}
	// Stopping, when set, is closed when the runner process is asked to
	// stop (SIGTERM, SIGINT): the run is stopped, and its final writes are
	// given up StopRecordFor after they began. Nil: when Run's ctx is
	// done (an Executor used in-process).
	Stopping <-chan struct{}

	// supervisor is the worker's link to its supervisor process;
	// an Executor used in-process has none, and contains nothing.
	supervisor *link
	// reused is set when this process has run a task before (tasks.go).
	reused bool
	// abandoned is set when the run gave up on a plugin that ignored
	// cancellation: its goroutine may still run, so this process must not
	// serve another task.
	abandoned bool
	// maxRSSBefore is the worker's RUSAGE_CHILDREN ru_maxrss when a reused
	// run began: a larger one at its end is a program of this run.
	maxRSSBefore int64
}

// now is the runner's clock: Now when set, else the database server's
// time by the node's anchor (Spec.ClockServer), else the host's.
func (r *Executor) now() time.Time {
	switch {
	case r.Now != nil:
		return r.Now()
	case !r.Spec.ClockServer.IsZero():
		return queue.ClockAt(r.Spec.ClockServer, time.Duration(r.Spec.ClockMono)).Now()
	}
	return time.Now()
}

// self begins this run and describes it: under a supervisor, the
// supervisor's pid and start time (the process that leads the run's group,
// which the node watches and signals) and the run's token, which the
// supervisor gives (it also holds the run's proof and cgroup); the run
// marker, set here, goes to every program the task starts. Without a
// supervisor: this process, with a fresh token.
// With a supervisor, it also returns the run's pids cgroup at the node's
// process limit ("" for none).
func (r *Executor) self(ctx context.Context) (queue.RunnerInfo, string, error) {
	if sup := r.supervisor; sup != nil {
		token, pids, err := sup.begin(ctx, r.Spec.Task)
		if err != nil {
			return queue.RunnerInfo{}, "", err
		}
		if err := os.Setenv(contain.EnvRun, contain.Marker(r.Spec.Task, token.Hex())); err != nil {
			return queue.RunnerInfo{}, "", fmt.Errorf("set the run marker: %w", err)
		}
		if r.reused {
			var ru syscall.Rusage
			if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
				r.maxRSSBefore = ru.Maxrss
			}
		}
		info := queue.RunnerInfo{Token: token, PID: sup.pid, Started: sup.started}
		info.Host, _ = os.Hostname()
		return info, pids, nil
	}
	info := queue.RunnerInfo{Token: bson.NewObjectID(), PID: os.Getpid()}
	if p, err := process.NewProcess(int32(info.PID)); err == nil {
		info.Started, _ = p.CreateTime()
	}
	info.Host, _ = os.Hostname()
	return info, "", nil
}

// taskRun is one task's run, from start to recorded result: what the
// Executor holds while it runs its task.
type taskRun struct {
	*Executor
	log      *zap.Logger
	store    queue.RunnerStore
	taskID   bson.ObjectID
	info     queue.RunnerInfo
	task     *queue.Task
	opts     queue.Options
	out      *outputs
	started  time.Time
	extraMu  sync.Mutex
	extra    bson.D
	timedOut bool
	expired  bool // end_before passed
	// pluginErr is the error the plugin returned, or its panic.
	pluginErr string
	// outcome is who decided how the run ended, set where den decides it;
	// empty means the plugin (or its program) did.
	outcome queue.Outcome
	// memoryWhy says why processes of the run were killed for its memory
	// (den's enforcement of its request, or the kernel's OOM killer);
	// empty: none were. memoryPeakMB is the most its processes (den's
	// worker not counted) were seen to hold.
	memoryWhy    string
	memoryPeakMB float64
	// maxProcesses is the run's process limit (0: none); pidsCgroup the
	// cgroup whose pids.max holds it, "" when RLIMIT_NPROC must.
	maxProcesses int
	pidsCgroup   string
	// landed is when a write of the run (its start, a heartbeat, its
	// result) last landed; gaveUpLogged is set once the runner said it
	// gives up (giveup.go).
	landed       landing
	gaveUpLogged bool
}

// prepare lets the task's plugin do its own work before the run begins
// (plugins.Preparer), where the run's usage is not yet counted. A plugin
// that panics there is logged and left to Run.
func (r *Executor) prepare(ctx context.Context) {
	p, ok := r.Plugins.Lookup(r.Spec.Plugin)
	if !ok {
		return
	}
	pr, ok := p.(plugins.Preparer)
	if !ok {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			r.Log.Error("plugin panicked while it prepared a run", zap.String("plugin", r.Spec.Plugin), zap.Any("panic", v))
		}
	}()
	pr.Prepare(ctx, r.Spec.PluginConfig)
}

// Run runs the task of r.Spec. ctx is cancelled when the runner is asked to
// stop (SIGTERM): because its task was cancelled, or for any other reason.
func (r *Executor) Run(ctx context.Context) error {
	taskID, err := bson.ObjectIDFromHex(r.Spec.Task)
	if err != nil {
		return fmt.Errorf("task id %q: %w", r.Spec.Task, err)
	}
	r.prepare(ctx)
	info, pids, err := r.self(ctx)
	if err != nil {
		return err
	}
	t := &taskRun{Executor: r, taskID: taskID, info: info, store: queue.NewStore(r.DB), pidsCgroup: pids,
		log: r.Log.With(zap.String("node", r.Spec.Node), zap.String("task_id", r.Spec.Task), zap.String("plugin", r.Spec.Plugin))}
	stopping := r.Stopping
	if stopping == nil {
		stopping = ctx.Done()
	}
	ok, err := t.start(ctx)
	if err != nil || !ok {
		return err
	}
	// Output is stored with a context that outlives a stopped task: what the
	// plugin printed before it was stopped is kept. The database's part of
	// it is given up only when the runner gives up (giveup.go).
	storeCtx := context.WithoutCancel(ctx)
	writeCtx, recording, stopBound := t.boundWrites(storeCtx, stopping)
	defer stopBound()
	t.out = newOutputs(writeCtx, gridfs.NewBucket(r.DB, queue.GridFSPrefix), taskID, r.Spec.GFS)
	t.started = time.Now()

	// The run holds its task while its heartbeats land (its lease); a
	// run that loses it is stopped as a cancelled one is.
	ctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	stopBeat := t.beat(ctx, lose)
	stopLive := t.publishLive(ctx)
	stopUsage := t.updateUsage(ctx)
	status := t.execute(ctx)
	stopUsage()
	stopLive()
	stopBeat()
	t.stopAndMeasure(storeCtx)
	recording()
	return t.record(writeCtx, ctx, status)
}

// stopAndMeasure stops every process the run left behind (a daemon, a
// double-forked child, a program its plugin abandoned) before the result
// is recorded, so that a retry never overlaps this run, and then measures
// what the run used, once all its processes are gone, for its final write
// (the result, or the retry's history entry): one exchange with the
// supervisor, no database command. The count of leftovers goes into the
// task (leftover_processes) and a line of stderr.
func (t *taskRun) stopAndMeasure(ctx context.Context) {
	if t.supervisor == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, t.opts.MaxTermination+time.Minute)
	defer cancel()
	n, m, errStop, errUsage := t.supervisor.stopThenUsage(sctx, t.opts.MaxTermination)
	switch {
	case errStop != nil:
		t.log.Error("could not stop the run's leftover processes", zap.Error(errStop))
	case n > 0:
		t.log.Info("stopped processes the task left running", zap.Int("processes", n))
		t.out.appendLine(fmt.Sprintf("den: stopped %d process(es) the task left running when it ended", n))
		t.extraMu.Lock()
		t.extra = append(t.extra, bson.E{Key: FieldLeftovers, Value: n})
		t.extraMu.Unlock()
	}
	if errUsage != nil {
		t.log.Warn("cannot measure the run's resource usage; recording the task without it", zap.Error(errUsage))
		return
	}
	u := t.usageOf(m, false)
	t.extraMu.Lock()
	t.extra = append(t.extra, bson.E{Key: queue.FieldUsage, Value: *u})
	t.extraMu.Unlock()
	t.memoryKilled(&m)
}

// FieldLeftovers is the task field that counts the processes a run left
// running when it ended and that den stopped.
const FieldLeftovers = "leftover_processes"

// leaseLost is why a runner stopped its run on its own: the run's lease
// (its heartbeats) could not be renewed, or the task is no longer its.
type leaseLost struct{ why string }

func (l leaseLost) Error() string { return l.why }

// errCancelSeen is why a runner stopped a run whose task it found
// cancelled at a heartbeat (its node did not tell it: frozen, or cut off).
var errCancelSeen = errors.New("cancelled (seen at a heartbeat)")

// beat renews the run's lease every Spec.Beat until stopped: a heartbeat
// (runner.beat) that also says whether the task is still this run's. The
// runner gives up the run, cancelling lose with why, when a heartbeat
// finds the task no longer its (rescued, retried, ended by someone else),
// cancelled (the node did not say so: frozen, or cut off), or when none
// has landed for StopAfter (the host's monotonic clock counts it).
func (t *taskRun) beat(ctx context.Context, lose context.CancelCauseFunc) (stop func()) {
	lease, every, grace := t.leaseTimes()
	limit := runner.StopAfter(lease, every, grace)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		landed := time.Now() // the task's start landed
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sent := time.Now()
			bctx, bcancel := context.WithTimeout(ctx, every)
			state, err := t.store.WriteBeat(bctx, t.taskID, t.Spec.Node, t.info.Token, t.now())
			bcancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				if !failing {
					failing = true
					t.log.Warn("heartbeats fail; the run stops if none lands within its lease", zap.Duration("stop_after", limit), zap.Error(err))
				}
				if since := time.Since(landed); since > limit {
					why := fmt.Sprintf("no heartbeat of its runner landed for %s (its lease: dead_node_after %s, less the time to stop it), so the runner stopped it before another node could start it again", since.Round(time.Second), lease)
					t.log.Error("lease lost: stopping the run", zap.String("why", why))
					lose(leaseLost{why})
					return
				}
			case state == queue.LeaseHeld:
				landed = sent
				t.landed.mark()
				if failing {
					failing = false
					t.log.Info("heartbeats land again")
				}
			case state == queue.LeaseCancelled:
				t.log.Info("the task was cancelled (seen at a heartbeat); stopping the run")
				lose(errCancelSeen)
				return
			default:
				why := "the task is no longer this run's (another node rescued, retried or ended it), so its runner stopped it"
				t.log.Warn("lease lost: stopping the run", zap.String("why", why))
				lose(leaseLost{why})
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// start moves the task to running, retrying while MongoDB is unreachable.
func (t *taskRun) start(ctx context.Context) (bool, error) {
	startTimeout := t.StartTimeout
	if startTimeout <= 0 {
		startTimeout = 5 * time.Minute
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	now := t.now()
	t.info.At = now
	var ok bool
	err := t.Retry.Retry(sctx, func(ctx context.Context) error {
		var err error
		t.task, ok, err = t.store.Start(ctx, t.taskID, t.Spec.Node, t.info, now)
		return err
	}, func(attempt int, err error) {
		if attempt == 1 {
			t.log.Warn("cannot start task yet; retrying", zap.Error(err))
		}
	})
	if err != nil {
		return false, fmt.Errorf("start task %s: %w", t.Spec.Task, err)
	}
	t.landed.mark()
	if !ok {
		t.log.Warn("task is no longer claimed by this node (released, reaped or deleted); not running it")
		return false, nil
	}
	var q *queue.Queue
	if len(t.Spec.Queue) > 0 {
		if parsed, err := queue.ParseQueue(bson.Raw(t.Spec.Queue)); err == nil && parsed.ID == t.task.Queue {
			q = &parsed
		}
	}
	if q == nil && !t.task.Queue.IsZero() {
		// The queue's settings (timeout, max_retries) must not be lost to
		// a passing error.
		err := t.Retry.Retry(sctx, func(ctx context.Context) error {
			var err error
			q, err = t.store.QueueDoc(ctx, t.task.Queue)
			return err
		}, nil)
		if err != nil {
			t.log.Warn("could not read the task's queue; running without its settings", zap.Error(err))
		}
	}
	t.opts = t.task.Options(q)
	if t.opts.MaxTermination == 0 {
		t.opts.MaxTermination = runner.DefaultGrace
		if t.Spec.Grace > 0 {
			t.opts.MaxTermination = time.Duration(t.Spec.Grace * float64(time.Second))
		}
	}
	if t.supervisor != nil {
		// What differs from the node's defaults, which the supervisor
		// has (a run at them, the common case, asks nothing more): told
		// with the process limit's question (limitProcesses), or sent on
		// their own below, one exchange either way.
		if t.opts.MaxTermination != t.defaultGrace() {
			t.supervisor.setGrace(t.opts.MaxTermination)
		}
		if mb := t.opts.Requested.MemoryMB; mb > 0 {
			t.supervisor.setMemoryLimit(int64(mb * (1 << 20)))
		}
	}
	t.limitProcesses(sctx)
	if t.supervisor != nil {
		if err := t.supervisor.flush(); err != nil {
			t.log.Warn("cannot tell the supervisor the task's grace time and memory request; the request is not enforced", zap.Error(err))
		}
	}
	return true, nil
}

// execute runs the plugin, if the task can be run, and returns its status.
func (t *taskRun) execute(ctx context.Context) int {
	plugin, found := t.Plugins.Lookup(t.Spec.Plugin)
	switch {
	case len(t.task.Problems) > 0:
		t.outcome = queue.Outcome{Kind: queue.OutcomeMalformed, Reason: strings.Join(t.task.Problems, "; ")}
		t.out.appendLine("den: task not run: " + t.outcome.Reason)
		return queue.StatusFailed
	case t.task.Cancel:
		t.outcome = queue.Outcome{Kind: queue.OutcomeCancelled, Reason: "cancelled before it started"}
		t.out.appendLine("den: cancelled before it started")
		return queue.StatusCancelled
	case !t.opts.EndBefore.IsZero() && !t.now().Before(t.opts.EndBefore):
		t.expired = true
		t.outcome = queue.Outcome{Kind: queue.OutcomeExpired, Reason: fmt.Sprintf("not started before its end_before (%s)", t.opts.EndBefore.UTC().Format(time.RFC3339))}
		t.out.appendLine("den: task not run: " + t.outcome.Reason)
		return queue.StatusFailed
	case !found:
		t.outcome = queue.Outcome{Kind: queue.OutcomePlugin, Reason: fmt.Sprintf("no plugin %q is registered in this den binary", t.Spec.Plugin)}
		t.out.appendLine("den: task not run: " + t.outcome.Reason)
		return queue.StatusFailed
	}
	t.log.Info("task started", zap.Int("attempt", t.opts.Attempts+1))
	runCtx := ctx
	// The run's deadline: its timeout, or the task's end_before if that
	// comes first.
	limit, byEnd := t.opts.Timeout, false
	if end := t.opts.EndBefore; !end.IsZero() {
		if left := end.Sub(t.now()); limit == 0 || left < limit {
			limit, byEnd = max(left, time.Millisecond), true
		}
	}
	if limit > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	// Output past max_output stops the plugin (cancelling its context) and
	// fails the task.
	pluginCtx, stopPlugin := context.WithCancel(runCtx)
	defer stopPlugin()
	maxOutput := t.maxOutput()
	t.out.setMax(maxOutput, stopPlugin)
	status := t.runPlugin(pluginCtx, plugin)
	if stream := t.out.cutStream(); stream != "" {
		t.outcome = queue.Outcome{Kind: queue.OutcomeResourceKilled, Reason: fmt.Sprintf("its %s passed max_output (%d bytes), so it was stopped", stream, maxOutput)}
		t.out.appendLine("den: task failed: " + t.outcome.Reason)
		return queue.StatusFailed
	}
	if ctx.Err() == nil && runCtx.Err() != nil && byEnd {
		t.expired = true
		t.outcome = queue.Outcome{Kind: queue.OutcomeExpired, Reason: fmt.Sprintf("still running at its end_before (%s), so it was stopped", t.opts.EndBefore.UTC().Format(time.RFC3339))}
		t.out.appendLine("den: task failed: " + t.outcome.Reason)
		return queue.StatusFailed
	}
	if ctx.Err() == nil && runCtx.Err() != nil {
		t.timedOut = true
		t.outcome = queue.Outcome{Kind: queue.OutcomeTimeout, Reason: fmt.Sprintf("timed out after %s and was stopped", t.opts.Timeout)}
		t.out.appendLine("den: task " + t.outcome.Reason)
		return queue.StatusFailed
	}
	return status
}

// limitProcesses decides the run's process limit: the node's
// runner.max_processes, lowered, never raised, by the task's or its
// queue's max_processes (either alone where the other is 0). Under a
// supervisor that has a pids cgroup for runs, the supervisor sets it as
// pids.max of a cgroup for the run's programs; else the programs' sandbox
// sets RLIMIT_NPROC.
func (t *taskRun) limitProcesses(ctx context.Context) {
	limit := t.Spec.MaxProcesses
	if n := t.opts.MaxProcesses; n > 0 && (limit <= 0 || n < limit) {
		limit = n
	}
	t.maxProcesses = max(limit, 0)
	if t.maxProcesses == 0 || t.supervisor == nil {
		t.pidsCgroup = ""
		return
	}
	if t.maxProcesses == t.Spec.MaxProcesses {
		// The node's limit: the pids cgroup begin gave, made at it.
		return
	}
	dir, err := t.supervisor.limitProcesses(ctx, t.maxProcesses)
	if err != nil {
		t.log.Warn("cannot ask the supervisor for the run's pids cgroup; RLIMIT_NPROC holds its process limit", zap.Error(err))
		return
	}
	t.pidsCgroup = dir
}

// defaultGrace is the grace the supervisor holds for a run until told
// otherwise: the node's max_termination_time (Spec.Grace), else
// DefaultGrace.
func (t *taskRun) defaultGrace() time.Duration {
	if t.Spec.Grace > 0 {
		return time.Duration(t.Spec.Grace * float64(time.Second))
	}
	return runner.DefaultGrace
}

// maxOutput is the cap of each output stream: the node's max_output
// (default DefaultMaxOutput), lowered, never raised, by the task's or its
// queue's.
func (t *taskRun) maxOutput() int64 {
	limit := int64(runner.DefaultMaxOutput)
	if t.Spec.MaxOutput > 0 {
		limit = t.Spec.MaxOutput
	}
	if t.opts.MaxOutput > 0 {
		limit = min(limit, t.opts.MaxOutput)
	}
	return limit
}

// runPlugin calls the plugin, turns a panic or a bad status into a failure
// with the reason in stderr, and returns the status to record. Once ctx is
// done it waits at most the grace time for the plugin to return.
func (t *taskRun) runPlugin(ctx context.Context, p plugins.Plugin) int {
	type result struct {
		status   int
		err      error
		panicked string
	}
	done := make(chan result, 1)
	env := plugins.NewEnv(plugins.Env{
		Stdout: t.out.stdout, Stderr: t.out.stderr, DB: t.DB, Log: t.log, Grace: t.opts.MaxTermination,
		MaxProcesses: t.maxProcesses, PidsCgroup: t.pidsCgroup, MemoryRequest: int64(math.Ceil(t.opts.Requested.MemoryMB * (1 << 20))),
		CPURequest: t.opts.Requested.CPUs,
	}, t.Spec.Plugin, t.Spec.PluginConfig, t.record1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				t.out.appendLine(fmt.Sprintf("den: plugin %s panicked: %v\n\n%s", t.Spec.Plugin, v, debug.Stack()))
				t.log.Error("plugin panicked", zap.Any("panic", v))
				done <- result{status: queue.StatusFailed, panicked: fmt.Sprint(v)}
			}
		}()
		st, err := p.Run(ctx, t.task, env)
		done <- result{status: st, err: err}
	}()
	select {
	case res := <-done:
		t.notePluginErr(res.err, res.panicked)
		return validate(res.status, res.err, t.out)
	case <-ctx.Done():
	}
	// The plugin's own grace, plus the time a program's leftover children
	// may hold its output open (the command plugin's WaitDelay), plus slack.
	grace := time.NewTimer(t.opts.MaxTermination + runner.PluginSlack)
	defer grace.Stop()
	select {
	case res := <-done:
		t.notePluginErr(res.err, res.panicked)
		return validate(res.status, res.err, t.out)
	case <-grace.C:
		t.out.appendLine(fmt.Sprintf("den: plugin did not stop within %s of being asked to; recorded without it", t.opts.MaxTermination))
		t.log.Warn("plugin ignored cancellation; abandoning it (this runner takes no more tasks)")
		t.abandoned = true
		return queue.StatusFailed
	}
}

// notePluginErr keeps the plugin's error or panic for the run's outcome;
// a refusal (plugins.Refuse) decides it: refused, never retried.
func (t *taskRun) notePluginErr(err error, panicked string) {
	switch {
	case panicked != "":
		t.pluginErr = "panicked: " + panicked
	case err != nil:
		t.pluginErr = err.Error()
		if plugins.Refused(err) {
			t.outcome = queue.Outcome{Kind: queue.OutcomeRefused, Reason: err.Error()}
		}
	}
}

// record1 keeps a field the plugin recorded (plugins.Env.Record has
// refused reserved names) for the final write.
func (t *taskRun) record1(field string, value any) {
	t.extraMu.Lock()
	defer t.extraMu.Unlock()
	for i := range t.extra {
		if t.extra[i].Key == field {
			t.extra[i].Value = value
			return
		}
	}
	t.extra = append(t.extra, bson.E{Key: field, Value: value})
}

// validate applies the protocol's rule that a finished task has a positive
// status, and the plugin interface's rule for errors.
func validate(status int, err error, out *outputs) int {
	if err != nil {
		out.appendLine("den: plugin returned an error: " + err.Error())
		if status <= 1 {
			return queue.StatusFailed
		}
		return status
	}
	if status <= 0 {
		out.appendLine(fmt.Sprintf("den: plugin returned status %d; a finished task's status must be a positive integer (1 succeeded, 2 failed): recording 2", status))
		return queue.StatusFailed
	}
	return status
}
