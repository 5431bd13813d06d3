package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// A run's final writes (its output, its result or retry, the queue's
// count_todo) are retried until they land, so that a database outage
// loses no run. Two things end the retries, and then the runner exits
// without recording the run, saying so in one log line (run.gaveUp):
//
//   - Its node is gone (the node process that started it has exited: its
//     task channel closed, Executor.NodeGone) and no write of the run has
//     landed for GiveUpAfter. The lease has long run out by then: any
//     node may rescue the task (HeldFor), and one will once the database
//     answers; a node of the same name restarted on this host rescues it
//     as soon as it finds this runner gone. Waiting on would keep two
//     processes per task alive for ever when the database is gone for
//     good (or the node and the database stopped together).
//   - It was asked to stop (SIGTERM or SIGINT, Executor.Stopping) and
//     StopRecordFor has passed since it began recording (the run is
//     stopped first, as a cancel stops it). An operator's SIGTERM then
//     ends a runner whatever the database does.
//
// A runner whose node lives and which was not asked to stop never gives
// up: its node holds the task and rescues nothing while the runner
// lives, so the result lands whenever the database answers. Nor does a
// run give up while its lease holds: GiveUpAfter is longer than the time
// after which a run stops itself for want of a heartbeat (StopAfter).
// Starting a task has its own limit (Executor.StartTimeout).

// gaveUp is why a runner gave up recording its run: the cause of its
// final writes' context.
type gaveUp struct {
	why   string
	since time.Duration // since the last write of the run landed
	bound time.Duration // runner.GiveUpAfter, or runner.StopRecordFor
}

func (g gaveUp) Error() string { return "gave up recording the run: " + g.why }

// isGaveUp reports whether err is, or wraps, a gaveUp.
func isGaveUp(err error) bool {
	var g gaveUp
	return errors.As(err, &g)
}

// landing is when a write of the run last landed (the host's monotonic
// clock).
type landing struct {
	mu sync.Mutex
	at time.Time
}

func (l *landing) mark() {
	l.mu.Lock()
	l.at = time.Now()
	l.mu.Unlock()
}

func (l *landing) since() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.at)
}

// leaseTimes returns the run's lease (the node's dead_node_after), how
// often it beats, and its grace (SIGTERM to SIGKILL).
func (t *taskRun) leaseTimes() (lease, every, grace time.Duration) {
	every = queue.DefaultBeat
	if t.Spec.Beat > 0 {
		every = time.Duration(t.Spec.Beat * float64(time.Second))
	}
	lease = queue.DefaultDeadNodeAfter
	if t.Spec.DeadNodeAfter > 0 {
		lease = time.Duration(t.Spec.DeadNodeAfter * float64(time.Second))
	}
	grace = t.opts.MaxTermination
	if grace <= 0 {
		grace = time.Duration(t.Spec.Grace * float64(time.Second))
	}
	return lease, every, grace
}

// boundWrites returns the context of the run's final writes: parent,
// cancelled with a gaveUp cause when the runner gives up (see above).
// stopping is closed when the runner is asked to stop. recording must be
// called when the run begins recording its result; stop ends the watch.
func (t *taskRun) boundWrites(parent context.Context, stopping <-chan struct{}) (ctx context.Context, recording, stop func()) {
	lease, every, grace := t.leaseTimes()
	giveUpAfter := runner.GiveUpAfter(lease, every, grace)
	ctx, cancel := context.WithCancelCause(parent)
	begun := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		gone := t.NodeGone
		var (
			nodeTimer, stopTimer      <-chan time.Time
			signalled, recordingBegun bool
		)
		for {
			select {
			case <-ctx.Done():
				return
			case <-gone:
				gone = nil
				nodeTimer = time.After(giveUpAfter - t.landed.since())
				continue
			case <-nodeTimer:
				if since := t.landed.since(); since < giveUpAfter {
					nodeTimer = time.After(giveUpAfter - since) // a write landed meanwhile
					continue
				}
				since := t.landed.since()
				cancel(gaveUp{since: since, bound: giveUpAfter, why: fmt.Sprintf(
					"its node is gone (the node process that started this runner exited) and no write of the run has landed for %s, past its bound of %s (dead_node_after %s: the lease, the time to stop the run, then one more lease); any node may rescue the task",
					since.Round(100*time.Millisecond), giveUpAfter, lease)})
				return
			case <-stopping:
				stopping, signalled = nil, true
			case <-begun:
				begun, recordingBegun = nil, true
			case <-stopTimer:
				cancel(gaveUp{since: t.landed.since(), bound: runner.StopRecordFor, why: fmt.Sprintf(
					"the runner was stopped by a signal and could not record the run within %s", runner.StopRecordFor)})
				return
			}
			if signalled && recordingBegun && stopTimer == nil {
				stopTimer = time.After(runner.StopRecordFor)
			}
		}
	}()
	recording = func() { once.Do(func() { close(begun) }) }
	return ctx, recording, func() { cancel(nil); <-done }
}

// gaveUp returns, once the run's final writes were given up (ctx's
// cause), that cause, after logging it in one line with what was left
// unrecorded and the status the run would have had; else nil.
func (t *taskRun) gaveUp(ctx context.Context, unrecorded string, status int, outcome queue.Outcome) error {
	var g gaveUp
	if !errors.As(context.Cause(ctx), &g) {
		return nil
	}
	if !t.gaveUpLogged {
		t.gaveUpLogged = true
		t.log.Error("task runner gives up: exiting without recording the run; the task is rescued once the database answers",
			zap.String("reason", g.why), zap.String("unrecorded", unrecorded),
			zap.Int("status", status), zap.String("outcome", outcome.Kind), zap.String("outcome_reason", outcome.Reason),
			zap.Duration("since_last_write", g.since), zap.Duration("give_up_after", g.bound))
	}
	return g
}
