package worker

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// memoryKilled notes, from the supervisor's measure at the run's end,
// whether processes of the run were killed for its memory (by den, or by
// the kernel's OOM killer in its cgroup), and says so in its stderr. The
// outcome is decided in record: resource_killed only for a run that failed
// (a program may survive the loss of a child) and that den had not
// stopped for another reason (a timeout, a cancel).
func (t *taskRun) memoryKilled(m *runner.Measured) {
	if m == nil || (m.MemoryKill == nil && m.OOMKills == 0) {
		return
	}
	if k := m.MemoryKill; k != nil {
		t.memoryWhy = fmt.Sprintf("its processes held %d MiB, more than the %d MiB it requested (requested_resources.memory_mb): den killed them", k.RSS>>20, k.Limit>>20)
	} else {
		t.memoryWhy = fmt.Sprintf("the kernel's OOM killer killed %d of its processes", m.OOMKills)
	}
	t.memoryPeakMB = float64(m.PeakTaskRSS) / (1 << 20)
	t.out.appendLine("den: " + t.memoryWhy)
}

// nextRequest is the request for the retry of a run stopped for its
// memory, and false when no live den node offers more (the run then fails
// for good, and its reason and stderr say why).
func (t *taskRun) nextRequest(ctx context.Context) (*queue.Resources, bool) {
	old := t.opts.Requested
	if old.MemoryMB <= 0 {
		// Killed by the kernel without a request: start from what its
		// processes held (den's worker not counted).
		old.MemoryMB = math.Ceil(t.memoryPeakMB)
	}
	live := time.Duration(t.Spec.DeadNodeAfter * float64(time.Second))
	if live <= 0 {
		beat := queue.DefaultBeat
		if t.Spec.Beat > 0 {
			beat = time.Duration(t.Spec.Beat * float64(time.Second))
		}
		live = 5 * beat
	}
	var largest float64
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := t.Retry.Retry(octx, func(ctx context.Context) error {
		offers, err := t.store.Offers(ctx, t.now().Add(-live))
		for _, o := range offers {
			largest = max(largest, o.MemoryMB)
		}
		return err
	}, nil)
	if err != nil {
		t.log.Warn("cannot read what the nodes offer; retrying with more memory, uncapped", zap.Error(err))
	}
	next, ok, why := queue.NextMemoryRequest(old, t.opts.MemoryRetryFactor, largest)
	if !ok {
		t.out.appendLine("den: not retried: " + why)
		t.outcome.Reason += "; not retried: " + why
		return nil, false
	}
	return &next, true
}
