package worker

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/runner"
)

// A runner may serve several tasks of its queue, one after another, so
// that a busy queue does not pay for starting two processes per task (most
// of a short task's cost). The node decides: it hands an idle runner the
// next task it claims from the same queue, retires a runner after
// runner.max_tasks tasks or runner.idle without one, and stops reusing
// runners when it stops. Nothing changes for the task or the database.
//
// The node hands the worker its next task over the task channel
// (den/runner/protocol.go), and only to a runner whose spec says it may (Spec.Reuse).
// Only the node that started a runner holds its channel: once that node
// is gone (stopped, restarted), the channel is closed and the runner
// retires when its task ends, so a node that signals a runner it did not
// start (by the task's runner field) signals a runner that will never
// take another task.
//
// Between two tasks, the worker has recorded the first task's result,
// every process of that run has been stopped (the supervisor's "stop"),
// and the supervisor holds no run proof; the next run gets a new token,
// marker, cgroup and proof (the supervisor's begin). Cancellation and live-output
// requests for a reused runner come over the channel, naming their task,
// and are ignored unless that task is the one running: a signal could
// arrive after its task ended and hit the next.

// taskLink is the worker's end of the task channel.
type taskLink struct {
	f    *os.File
	live chan<- os.Signal
	next chan runner.Spec
	gone chan struct{} // closed when the node's end is closed

	mu      sync.Mutex
	current string             // the task running, hex; "" between tasks
	cancel  context.CancelFunc // stops the current run
}

// newTaskLink serves the worker's end of the task channel, f, which must
// be non-blocking (takeInherited), so that closing it ends the reader.
func newTaskLink(f *os.File, live chan<- os.Signal) *taskLink {
	t := &taskLink{f: f, live: live, next: make(chan runner.Spec, 1), gone: make(chan struct{})}
	// The node uses the channel for this runner only once it has heard
	// this: a runner of an older den would not read it.
	runner.Send(f, runner.Ready{})
	go t.read()
	return t
}

// read takes the node's messages until the channel closes.
func (t *taskLink) read() {
	defer close(t.gone)
	buf := make([]byte, runner.MaxMessage)
	for {
		m, err := runner.Receive(t.f, buf)
		if errors.Is(err, runner.ErrUnknown) {
			continue
		}
		if err != nil {
			return
		}
		switch m := m.(type) {
		case runner.RunTask:
			select {
			case t.next <- m.Spec:
			default: // a second task before the first was taken: the node never does that
			}
		case runner.CancelRun:
			t.mu.Lock()
			if m.Task == t.current && t.cancel != nil {
				t.cancel()
			}
			t.mu.Unlock()
		case runner.LiveOutput:
			t.mu.Lock()
			if m.Task == t.current {
				select {
				case t.live <- syscall.SIGUSR1:
				default:
				}
			}
			t.mu.Unlock()
		}
	}
}

// begin makes task (hex) the one running; cancel stops its run.
func (t *taskLink) begin(task string, cancel context.CancelFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current, t.cancel = task, cancel
}

// end: no task runs.
func (t *taskLink) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current, t.cancel = "", nil
}

// done tells the node that task's run is over and waits for the next
// task: ok is false when the node closed the channel (retiring this
// runner) or ctx ended.
func (t *taskLink) done(ctx context.Context, task string) (next runner.Spec, ok bool) {
	if err := runner.Send(t.f, runner.Done{Task: task}); err != nil {
		return next, false
	}
	select {
	case next = <-t.next:
		if _, err := bson.ObjectIDFromHex(next.Task); err != nil {
			return next, false
		}
		return next, true
	case <-t.gone:
		return next, false
	case <-ctx.Done():
		return next, false
	}
}

// report tells the node how a run ended (see Report).
func (t *taskLink) report(r runner.Report) error { return runner.Send(t.f, r) }

func (t *taskLink) close() { t.f.Close() }
