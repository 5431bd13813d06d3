package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// How a run ends: what it records (decided by decide, a pure function
// that record_internal_test.go covers with a table), and the writes that
// record it, retried until they land or the worker gives up (giveup.go).

// runEnd is what happened to a run, as record finds it once the plugin
// returned (or was abandoned) and the run's processes are stopped.
type runEnd struct {
	// status is the plugin's, validated; outcome what den decided while
	// the run went on (a timeout, a cancel before the start, max_output),
	// zero when it decided nothing.
	status  int
	outcome queue.Outcome
	// leaseLost is why the run lost its lease, nil when it did not.
	leaseLost *leaseLost
	// stopped: the run's context ended (a cancel, SIGTERM, the lost lease).
	stopped bool
	// cancelled: the task was found cancelled once the run stopped (read
	// only when mustReadCancel says so).
	cancelled bool
	// timedOut: the run's timeout stopped it; expired: its end_before.
	timedOut, expired bool
	// canRetry: the task has retries left (queue.Options.CanRetry).
	canRetry bool
	// memoryWhy says why processes of the run were killed for memory; ""
	// none were.
	memoryWhy string
}

// verdict is how a run ends: the status and outcome to record, a line
// for its stderr, and whether it is put back for another attempt.
type verdict struct {
	status  int
	outcome queue.Outcome // zero: the plugin's, decided from its fields (decided)
	line    string        // appended to the run's stderr; "": none
	retry   bool
	// moreMemory: the run was stopped for its memory and may be retried:
	// ask the nodes' offers for more (nextRequest), which may say no.
	moreMemory bool
}

// mustReadCancel says whether the run's end depends on whether the task
// was cancelled meanwhile: it stopped, neither for its lease nor as a
// cancelled task, so a cancel the node did not get to say (or said by
// SIGTERM) must be told from any other signal.
func (e runEnd) mustReadCancel() bool {
	return e.status != queue.StatusCancelled && e.leaseLost == nil && e.stopped
}

// decide is how a run ends: cancelled (-5) when the task was cancelled
// while it ran, failed when it lost its lease or its runner was stopped
// by a signal, else the plugin's status; then put back for a retry when
// it failed with retries left, its time (end_before) is not up and the
// plugin did not refuse it (plugins.Refuse: outcome refused). A run
// stopped for its memory, when nothing else den did came first, ends
// resource_killed and is retried with more memory, if a node offers more.
func decide(e runEnd) verdict {
	v := verdict{status: e.status, outcome: e.outcome}
	switch {
	case e.status == queue.StatusCancelled:
	case e.leaseLost != nil:
		// Recorded when the database answers, fenced by the run's token as
		// every write: a task another node took meanwhile is left alone.
		v.status = queue.StatusFailed
		v.outcome = queue.Outcome{Kind: queue.OutcomeLeaseLost, Reason: e.leaseLost.why}
		v.line = "den: " + e.leaseLost.why
	case !e.stopped:
	case e.cancelled:
		v.status = queue.StatusCancelled
		v.outcome = queue.Outcome{Kind: queue.OutcomeCancelled, Reason: "cancelled while running"}
		v.line = "den: cancelled while running"
	case !e.timedOut:
		v.status = queue.StatusFailed
		v.outcome = queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "the task runner was stopped by a signal"}
		v.line = "den: the task runner was stopped by a signal"
	}
	// An expired task is never retried: its time is up; nor a refused one:
	// the plugin would refuse it again.
	v.retry = v.status >= queue.StatusFailed && !e.expired && e.canRetry && v.outcome.Kind != queue.OutcomeRefused
	if v.status >= queue.StatusFailed && e.memoryWhy != "" && v.outcome.Kind == "" {
		// The memory kill decided this run's end: nothing else den did
		// (timeout, cancel, max_output) came first.
		v.outcome = queue.Outcome{Kind: queue.OutcomeResourceKilled, Reason: e.memoryWhy}
		v.moreMemory = v.retry
	}
	return v
}

// record stores the run's outcome (decide). Its writes are retried until
// they land or the runner gives up (storeCtx's cause; giveup.go): it then
// returns the gaveUp, having logged it.
func (t *taskRun) record(storeCtx, runCtx context.Context, status int) error {
	v := t.verdict(storeCtx, runCtx, status)
	var next *queue.Resources
	if v.moreMemory {
		next, v.retry = t.nextRequest(storeCtx)
	}
	stdout, stderr, err := t.out.finish() // a plugin abandoned after its grace can write no more
	extra, outcome := t.finalFields(v.status)
	if err := t.gaveUp(storeCtx, "the run's output and result", v.status, outcome); err != nil {
		return err
	}
	if err != nil {
		t.log.Error("cannot store task output in GridFS", zap.Error(err))
		stdout, stderr = "", "den: output could not be stored: "+err.Error()
	}
	if v.retry {
		return t.retry(storeCtx, v.status, stdout, stderr, extra, outcome, next)
	}
	return t.finish(storeCtx, queue.Result{Status: v.status, Stdout: stdout, Stderr: stderr, Extra: extra, KeyHold: queue.KeyHold(t.task)}, outcome)
}

// verdict finds what happened to the run (reading the task when
// mustReadCancel says so), decides how it ends, and keeps that: the
// outcome for decided, the line in its stderr.
func (t *taskRun) verdict(storeCtx, runCtx context.Context, status int) verdict {
	e := runEnd{status: status, outcome: t.outcome, stopped: runCtx.Err() != nil, timedOut: t.timedOut, expired: t.expired,
		canRetry: t.opts.CanRetry(t.timedOut), memoryWhy: t.memoryWhy}
	var lost leaseLost
	if errors.As(context.Cause(runCtx), &lost) {
		e.leaseLost = &lost
	}
	if e.mustReadCancel() {
		e.cancelled = t.cancelledMeanwhile(storeCtx)
	}
	v := decide(e)
	if v.line != "" {
		t.out.appendLine(v.line)
	}
	t.outcome = v.outcome
	return v
}

// cancelledMeanwhile reads whether the task was cancelled while it ran.
// Retried a little: a read that fails once (the node's relay going away)
// must not turn a cancelled task into a failed one.
func (t *taskRun) cancelledMeanwhile(ctx context.Context) bool {
	var task *queue.Task
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := t.Retry.Retry(rctx, func(ctx context.Context) error {
		var err error
		task, err = t.store.Task(ctx, t.taskID)
		return err
	}, nil)
	return err == nil && task != nil && task.Cancel
}

// finalFields returns the fields the run's final write sets beside its
// status and output (what the plugin recorded, den's own, the outcome's)
// and its outcome (decided).
func (t *taskRun) finalFields(status int) (bson.D, queue.Outcome) {
	t.extraMu.Lock()
	if t.timedOut {
		t.extra = append(t.extra, bson.E{Key: "timed_out", Value: true})
	}
	if t.expired {
		t.extra = append(t.extra, bson.E{Key: queue.FieldExpired, Value: true})
	}
	extra := append(bson.D(nil), t.extra...)
	t.extraMu.Unlock()
	outcome := t.decided(status, extra)
	return append(extra, outcome.Fields()...), outcome
}

// finish records the run's result: its status, output and fields, then
// the queue's count_todo and the tasks that come after it. A task that
// changed under the run is left as it is, its output kept in GridFS.
func (t *taskRun) finish(ctx context.Context, result queue.Result, outcome queue.Outcome) error {
	status := result.Status
	var recorded bool
	t.retryForever(ctx, "record task result", func(ctx context.Context) error {
		var err error
		recorded, err = t.store.Finish(ctx, t.taskID, t.Spec.Node, t.info.Token, result, t.now())
		if queue.TooLarge(err) && !isFileID(result.Stdout) {
			t.log.Warn("result does not fit in the task document; storing the output in GridFS instead")
			result.Stdout, result.Stderr, err = t.out.toGridFS(ctx, result.Stdout, result.Stderr)
			if err == nil {
				err = errors.New("retrying with the output in GridFS")
			}
		}
		return err
	})
	if err := t.gaveUp(ctx, "the run's result", status, outcome); err != nil {
		return err
	}
	t.landed.mark()
	if !recorded {
		if err := t.keepOrphanedOutput(ctx, result, outcome); err != nil {
			return err
		}
		t.report(0, false, outcome)
		return nil
	}
	t.report(status, false, outcome)
	if status > 0 && t.task != nil {
		t.retryForever(ctx, "decrement count_todo", func(ctx context.Context) error {
			return t.store.DecrementTodo(ctx, t.task.Queue)
		})
		if err := t.gaveUp(ctx, "the queue's count_todo decrement (the result is recorded; count_todo stays one too high until `den counts fix`)", status, outcome); err != nil {
			return err
		}
	}
	t.releaseDependents(ctx, status)
	t.log.Info("task finished", zap.Int("status", status), zap.String("outcome", queue.StatusName(status)),
		zap.Duration("took", time.Since(t.started)), zap.Bool("gridfs", isFileID(result.Stdout)), zap.Bool("timed_out", t.timedOut))
	return nil
}

// decided returns the run's outcome: what den decided (t.outcome), else
// what the plugin's program or the plugin itself did (the command plugin
// records exit_code and signal).
func (t *taskRun) decided(status int, extra bson.D) queue.Outcome {
	if t.outcome.Kind != "" {
		return t.outcome
	}
	var code *int
	var sig string
	for _, e := range extra {
		switch e.Key {
		case "exit_code":
			if n, ok := e.Value.(int); ok {
				code = &n
			}
		case "signal":
			sig, _ = e.Value.(string)
		}
	}
	switch {
	case sig != "":
		return queue.Outcome{Kind: queue.OutcomeSignal, Reason: "its program was killed by " + sig}
	case code != nil:
		return queue.Outcome{Kind: queue.OutcomeExitCode, Reason: fmt.Sprintf("its program exited with code %d", *code)}
	}
	reason := fmt.Sprintf("the plugin returned status %d (%s)", status, queue.StatusName(status))
	if t.pluginErr != "" {
		reason = "the plugin failed: " + t.pluginErr
	}
	return queue.Outcome{Kind: queue.OutcomePlugin, Reason: reason}
}

func (t *taskRun) report(status int, retry bool, outcome queue.Outcome) {
	if t.Report == nil {
		return
	}
	stdout, stderr := t.out.written()
	r := runner.Report{Task: t.Spec.Task, Status: status, Retry: retry, Stdout: stdout, Stderr: stderr,
		Outcome: outcome.Kind, Run: time.Since(t.started).Seconds()}
	if t.task != nil {
		r.Wait = max(t.started.Sub(queue.ReadyAt(*t.task)).Seconds(), 0)
	}
	t.Report(r)
}

// releaseDependents moves on the tasks that come after this one, when it
// has any (has_dependents): queued when this one succeeded and they wait
// for nothing else, cancelled (transitively) when it ended any other way.
// The nodes' periodic sweep does the same for whatever this misses.
func (t *taskRun) releaseDependents(ctx context.Context, status int) {
	if t.task == nil {
		return
	}
	if has, _ := t.task.Raw.Lookup(queue.FieldHasDependents).BooleanOK(); !has {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	released, cancelled, err := t.store.SettleDependents(ctx, []queue.EndedTask{{ID: t.taskID, Status: status}}, t.now())
	if released > 0 {
		t.log.Info("queued the tasks that came after this one", zap.Int64("count", released))
	}
	if len(cancelled) > 0 {
		t.log.Info("cancelled the tasks that came after this one", zap.Int("count", len(cancelled)))
	}
	if err != nil {
		t.log.Warn("could not move on the tasks that come after this one; the nodes' sweep will", zap.Error(err))
	}
}

// retry puts the task back in its queue with this run in its history. The
// run's output always goes to GridFS, so the history can point at it.
func (t *taskRun) retry(ctx context.Context, status int, stdout, stderr any, extra bson.D, outcome queue.Outcome, next *queue.Resources) error {
	entry := queue.HistoryEntry{
		Attempt: t.opts.Attempts + 1, Node: t.Spec.Node, Status: status, TimedOut: t.timedOut,
		Started: t.started, Ended: time.Now(), Outcome: outcome.Kind, Reason: outcome.Reason,
		NextRequested: next,
	}
	if t.opts.Requested != (queue.Resources{}) {
		entry.Requested = &t.opts.Requested
	}
	for _, e := range extra {
		switch e.Key {
		case "exit_code":
			if n, ok := e.Value.(int); ok {
				entry.ExitCode = &n
			}
		case "signal":
			entry.Signal, _ = e.Value.(string)
		case FieldLeftovers:
			entry.Leftovers, _ = e.Value.(int)
		case queue.FieldUsage:
			if u, ok := e.Value.(queue.Usage); ok {
				entry.Usage = &u
			}
		}
	}
	t.retryForever(ctx, "store the attempt's output", func(ctx context.Context) error {
		var err error
		entry.Stdout, entry.Stderr, err = t.out.toGridFS(ctx, stdout, stderr)
		return err
	})
	if err := t.gaveUp(ctx, "the run's output and its retry", status, outcome); err != nil {
		return err
	}
	at := t.opts.RetryAt(t.now(), entry.Attempt)
	var requeued bool
	t.retryForever(ctx, "put the task back for a retry", func(ctx context.Context) error {
		var err error
		requeued, err = t.store.Retry(ctx, t.taskID, t.Spec.Node, t.info.Token, entry, at, t.now())
		return err
	})
	if err := t.gaveUp(ctx, "the run's retry (its output is in GridFS under metadata.task_id)", status, outcome); err != nil {
		return err
	}
	t.landed.mark()
	if !requeued {
		t.log.Warn("task changed while it ran; not retrying it (its output is in GridFS under metadata.task_id)")
		t.report(0, false, outcome)
		return nil
	}
	t.report(status, true, outcome)
	if next != nil {
		t.log.Info("task stopped for passing its memory request; retrying with more", zap.Float64("memory_mb", t.opts.Requested.MemoryMB),
			zap.Float64("next_memory_mb", next.MemoryMB), zap.Int("attempt", entry.Attempt))
	}
	t.log.Info("task failed; retrying later", zap.Int("status", status), zap.Int("attempt", entry.Attempt),
		zap.Int("max_retries", t.opts.MaxRetries), zap.Time("start_after", at), zap.Bool("timed_out", t.timedOut))
	return nil
}

// keepOrphanedOutput handles a result that could not be recorded because
// the task changed under the runner: the output goes to GridFS under
// metadata.task_id, and the log says what happened. It returns the
// gaveUp when the runner gave up storing it.
func (t *taskRun) keepOrphanedOutput(ctx context.Context, result queue.Result, outcome queue.Outcome) error {
	var outID, errID bson.ObjectID
	t.retryForever(ctx, "store output of a task that changed meanwhile", func(ctx context.Context) error {
		var err error
		outID, errID, err = t.out.toGridFS(ctx, result.Stdout, result.Stderr)
		return err
	})
	if err := t.gaveUp(ctx, "the output of a task that changed meanwhile (reaped, rescued or deleted)", result.Status, outcome); err != nil {
		return err
	}
	fields := []zap.Field{zap.Int("status", result.Status), zap.String("stdout_file", outID.Hex()), zap.String("stderr_file", errID.Hex())}
	task, err := t.store.Task(ctx, t.taskID)
	switch {
	case err != nil:
		fields = append(fields, zap.NamedError("read_error", err))
	case task == nil:
		fields = append(fields, zap.String("now", "deleted"))
	default:
		fields = append(fields, zap.Int("now_status", task.Status), zap.String("now_node", task.Node))
	}
	t.log.Warn("task changed while it ran (reaped, rescued or deleted): its state was left as is; output kept in GridFS under metadata.task_id", fields...)
	return nil
}

// retryForever retries a write that must land, logging when it starts
// failing and when it recovers, until it lands or ctx ends (the runner
// gave up: the caller says so, with t.gaveUp).
func (t *taskRun) retryForever(ctx context.Context, what string, op func(context.Context) error) {
	failures := 0
	err := t.Retry.Retry(ctx, op, func(attempt int, err error) {
		failures = attempt
		if attempt == 1 {
			t.log.Warn("cannot "+what+"; retrying until it lands", zap.Error(err))
		}
	})
	if err != nil && isGaveUp(context.Cause(ctx)) {
		return
	}
	if err != nil {
		t.log.Error("gave up: cannot "+what, zap.Error(err))
		return
	}
	if failures > 0 {
		t.log.Info("done after retrying: "+what, zap.Int("attempts", failures+1))
	}
}

func isFileID(v any) bool {
	_, ok := v.(bson.ObjectID)
	return ok
}
