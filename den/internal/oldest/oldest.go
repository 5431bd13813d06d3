package oldest

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/queue"
)

// Queues is the most queues a Meter looks at: those with the
// most tasks to do first; and MaxTime how long it may take at most (on
// MongoDB, 100 indexed queries take milliseconds; on a server that scans
// a large collection for each, a minute: a metric is not worth that).
const (
	Queues  = 100
	MaxTime = 5 * time.Second
)

// Meter sets den_queue_oldest_ready_seconds, a step of the
// housekeeping every RefreshEvery (Every), within its share of the
// database's time (pace): for each queue the pass found with work
// (served, with tasks to do by count_todo, and not found empty by its
// last claim), how long the oldest task that a claim could take now has
// been ready (queue.NodeStore.OldestReady). One indexed query per queue,
// for at most Queues queues and MaxTime; a queue with nothing
// ready (or not measured) has no series. Only the housekeeping's
// goroutine uses it.
type Meter struct {
	*base.Env
	// Every is how often it measures (den's RefreshEvery).
	Every time.Duration
	at    time.Time // when it last measured
	pace  chore.Pace
}

func (m *Meter) Due(at time.Time) bool {
	return at.Sub(m.at) >= m.Every && m.pace.Ready()
}

// measure measures the queues of withWork at now.
func (m *Meter) Measure(ctx context.Context, withWork []queue.Queue, now time.Time) error {
	m.at = now // tried: a metric is not worth a step every round
	began := time.Now()
	defer m.pace.Ran(began)
	todo := slices.Clone(withWork)
	slices.SortStableFunc(todo, func(a, b queue.Queue) int {
		return cmp.Compare(*b.CountTodo, *a.CountTodo)
	})
	ages := map[string]float64{}
	until := time.Now().Add(MaxTime)
	for _, q := range todo[:min(len(todo), Queues)] {
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
