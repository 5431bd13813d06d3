package worker

import (
	"testing"

	"github.com/den-project/den/queue"
)

// How a run ends, from what happened to it: the plugin's status stands
// unless den stopped the run (its lease lost, the task cancelled, a
// signal), a failed run is retried while it has retries left and its time
// is not up, and a memory kill decides the outcome only when nothing else
// den did came first.
func TestDecide(t *testing.T) {
	t.Parallel()
	const (
		ok        = queue.StatusSucceeded
		failed    = queue.StatusFailed
		cancelled = queue.StatusCancelled
	)
	lost := &leaseLost{why: "no heartbeat landed"}
	timeout := queue.Outcome{Kind: queue.OutcomeTimeout, Reason: "timed out after 1s and was stopped"}
	leaseOutcome := queue.Outcome{Kind: queue.OutcomeLeaseLost, Reason: lost.why}
	cancelOutcome := queue.Outcome{Kind: queue.OutcomeCancelled, Reason: "cancelled while running"}
	diedOutcome := queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "the task runner was stopped by a signal"}
	memoryOutcome := queue.Outcome{Kind: queue.OutcomeResourceKilled, Reason: "passed its memory request"}
	refused := queue.Outcome{Kind: "refused", Reason: "command refused: /bin/sh is not allowed on this node"}
	for _, tc := range []struct {
		name     string
		end      runEnd
		readTask bool // mustReadCancel
		want     verdict
	}{
		{name: "succeeded", end: runEnd{status: ok, canRetry: true},
			want: verdict{status: ok}},
		{name: "failed with retries left", end: runEnd{status: failed, canRetry: true},
			want: verdict{status: failed, retry: true}},
		{name: "failed with none left", end: runEnd{status: failed},
			want: verdict{status: failed}},
		{name: "exit code 3 with retries left", end: runEnd{status: 3, canRetry: true},
			want: verdict{status: 3, retry: true}},
		{name: "expired is never retried", end: runEnd{status: failed, expired: true, canRetry: true},
			want: verdict{status: failed}},
		{name: "timed out, retries left", end: runEnd{status: failed, outcome: timeout, timedOut: true, canRetry: true},
			want: verdict{status: failed, outcome: timeout, retry: true}},
		{name: "lease lost while it succeeded", end: runEnd{status: ok, leaseLost: lost, stopped: true, canRetry: true},
			want: verdict{status: failed, outcome: leaseOutcome, line: "den: " + lost.why, retry: true}},
		{name: "lease lost, no retries", end: runEnd{status: ok, leaseLost: lost, stopped: true},
			want: verdict{status: failed, outcome: leaseOutcome, line: "den: " + lost.why}},
		{name: "lease lost after a cancel before it started", end: runEnd{status: cancelled, leaseLost: lost, stopped: true, canRetry: true},
			want: verdict{status: cancelled}},
		{name: "stopped, found cancelled", end: runEnd{status: failed, stopped: true, cancelled: true, canRetry: true}, readTask: true,
			want: verdict{status: cancelled, outcome: cancelOutcome, line: "den: cancelled while running"}},
		{name: "stopped by a signal", end: runEnd{status: ok, stopped: true, canRetry: true}, readTask: true,
			want: verdict{status: failed, outcome: diedOutcome, line: "den: the task runner was stopped by a signal", retry: true}},
		{name: "stopped while it timed out", end: runEnd{status: failed, outcome: timeout, stopped: true, timedOut: true}, readTask: true,
			want: verdict{status: failed, outcome: timeout}},
		{name: "stopped after a cancel before it started", end: runEnd{status: cancelled, stopped: true},
			want: verdict{status: cancelled}},
		{name: "refused is never retried", end: runEnd{status: failed, outcome: refused, canRetry: true},
			want: verdict{status: failed, outcome: refused}},
		{name: "refused, then its runner signalled", end: runEnd{status: failed, outcome: refused, stopped: true, canRetry: true}, readTask: true,
			want: verdict{status: failed, outcome: diedOutcome, line: "den: the task runner was stopped by a signal", retry: true}},
		{name: "refused, its memory killed too", end: runEnd{status: failed, outcome: refused, memoryWhy: memoryOutcome.Reason, canRetry: true},
			want: verdict{status: failed, outcome: refused}},
		{name: "memory killed, retries left", end: runEnd{status: failed, memoryWhy: memoryOutcome.Reason, canRetry: true},
			want: verdict{status: failed, outcome: memoryOutcome, retry: true, moreMemory: true}},
		{name: "memory killed, none left", end: runEnd{status: failed, memoryWhy: memoryOutcome.Reason},
			want: verdict{status: failed, outcome: memoryOutcome}},
		{name: "memory killed after its timeout", end: runEnd{status: failed, outcome: timeout, timedOut: true, memoryWhy: memoryOutcome.Reason, canRetry: true},
			want: verdict{status: failed, outcome: timeout, retry: true}},
		{name: "memory killed but it succeeded", end: runEnd{status: ok, memoryWhy: memoryOutcome.Reason, canRetry: true},
			want: verdict{status: ok}},
		{name: "memory killed and the runner signalled", end: runEnd{status: failed, stopped: true, memoryWhy: memoryOutcome.Reason, canRetry: true}, readTask: true,
			want: verdict{status: failed, outcome: diedOutcome, line: "den: the task runner was stopped by a signal", retry: true}},
	} {
		if got := tc.end.mustReadCancel(); got != tc.readTask {
			t.Errorf("%s: reads the task %t, want %t", tc.name, got, tc.readTask)
		}
		if got := decide(tc.end); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}
