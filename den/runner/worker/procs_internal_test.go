package worker

import (
	"context"
	"testing"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// A task's or queue's max_processes lowers the node's
// runner.max_processes, never raises it; either alone holds.
func TestMaxProcessesLowersNeverRaises(t *testing.T) {
	for _, tc := range []struct{ node, task, want int }{
		{1024, 0, 1024},
		{1024, 64, 64},
		{64, 5000, 64},
		{0, 64, 64},
		{0, 0, 0},
	} {
		r := &taskRun{Executor: &Executor{Spec: runner.Spec{MaxProcesses: tc.node}}, opts: queue.Options{MaxProcesses: tc.task}}
		r.limitProcesses(context.Background())
		if r.maxProcesses != tc.want || r.pidsCgroup != "" {
			t.Errorf("node %d, task %d: limit %d (cgroup %q), want %d and none without a supervisor", tc.node, tc.task, r.maxProcesses, r.pidsCgroup, tc.want)
		}
	}
}
