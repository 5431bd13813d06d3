package den

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/den-project/den/den/internal/chore"

	"github.com/den-project/den/den/internal/base"

	"github.com/den-project/den/queue"
)

// oldestQueues is the most queues oldestMeter looks at: those with the
// most tasks to do first; and oldestTime how long it may take at most (on
// MongoDB, 100 indexed queries take milliseconds; on a server that scans
// a large collection for each, a minute: a metric is not worth that).
const (
	oldestQueues = 100
	oldestTime   = 5 * time.Second
)

// oldestMeter sets den_queue_oldest_ready_seconds, a step of the
// housekeeping every RefreshEvery (every), within its share of the
// database's time (pace): for each queue the pass found with work
// (served, with tasks to do by count_todo, and not found empty by its
// last claim), how long the oldest task that a claim could take now has
// been ready (queue.NodeStore.OldestReady). One indexed query per queue,
// for at most oldestQueues queues and oldestTime; a queue with nothing
// ready (or not measured) has no series. Only the housekeeping's
// goroutine uses it.
type oldestMeter struct {
	*base.Env
	every time.Duration
	at    time.Time // when it last measured
	pace  chore.Pace
}

func (m *oldestMeter) due(r *round) bool {
	return r.at.Sub(m.at) >= m.every && m.pace.Ready()
}

func (m *oldestMeter) do(ctx context.Context, r *round) error {
	m.at = r.at // tried: a metric is not worth a step every round
	return m.measure(ctx, r.view.measure, r.at)
}

// measure measures the queues of withWork at now.
func (m *oldestMeter) measure(ctx context.Context, withWork []queue.Queue, now time.Time) error {
	began := time.Now()
	defer m.pace.Ran(began)
	todo := slices.Clone(withWork)
	slices.SortStableFunc(todo, func(a, b queue.Queue) int {
		return cmp.Compare(*b.CountTodo, *a.CountTodo)
	})
	ages := map[string]float64{}
	until := time.Now().Add(oldestTime)
	for _, q := range todo[:min(len(todo), oldestQueues)] {
		if time.Now().After(until) {
			break // the rest go without a series until the next time
		}
		ready, ok, err := m.Store.OldestReady(ctx, q.ID, now)
		if err != nil {
			return err
		}
		if ok {
			name := m.Metrics.Queue(q.Name)
			ages[name] = max(ages[name], now.Sub(ready).Seconds(), 0)
		}
	}
	m.Metrics.OldestReady.Reset()
	for name, age := range ages {
		m.Metrics.OldestReady.WithLabelValues(name).Set(age)
	}
	return nil
}
