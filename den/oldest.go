package den

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/den-project/den/queue"
)

// oldestQueues is the most queues measureOldest looks at: those with the
// most tasks to do first.
const oldestQueues = 100

// measureOldest sets den_queue_oldest_ready_seconds, every RefreshEvery:
// for each queue this node serves that has tasks to do (count_todo above
// 0) and that its last claim did not find empty, how long the oldest task
// that a claim could take now has been ready (queue.Store.OldestReady).
// One indexed query per queue, for at most oldestQueues queues; a queue
// with nothing ready has no series.
func (ps *passes) measureOldest(ctx context.Context, serve []queue.Queue, now time.Time) error {
	if now.Sub(ps.oldestAt) < ps.cfg.RefreshEvery || !ps.oldestPace.ready() {
		return nil
	}
	began := time.Now()
	defer ps.oldestPace.ran(began)
	var todo []queue.Queue
	for _, q := range serve {
		if q.CountTodo != nil && *q.CountTodo > 0 && ps.claimer.claimable(q) {
			todo = append(todo, q)
		}
	}
	slices.SortStableFunc(todo, func(a, b queue.Queue) int {
		return cmp.Compare(*b.CountTodo, *a.CountTodo)
	})
	ages := map[string]float64{}
	for _, q := range todo[:min(len(todo), oldestQueues)] {
		ready, ok, err := ps.store.OldestReady(ctx, q.ID, now)
		if err != nil {
			return err
		}
		if ok {
			name := ps.metrics.Queue(q.Name)
			ages[name] = max(ages[name], now.Sub(ready).Seconds(), 0)
		}
	}
	ps.metrics.OldestReady.Reset()
	for name, age := range ages {
		ps.metrics.OldestReady.WithLabelValues(name).Set(age)
	}
	ps.oldestAt = now
	return nil
}
