package den

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// passView is what a full pass read that the housekeeping works with.
type passView struct {
	// at is when the pass started.
	at time.Time
	// queues are the queues of the loop's last read of every queue (at
	// read, at most RefreshEvery before the pass: queueBook), serve those
	// this node serves, byID the queues by _id. Nothing changes them.
	queues, serve []queue.Queue
	byID          queueIndex
	read          time.Time
	// running are the claimed and running counts of all nodes, as last
	// counted (the claimer replaces the map, never changes it).
	running queue.Running
	// measure are the served queues whose oldest ready task the
	// housekeeping measures (claimer.withWork).
	measure []queue.Queue
}

// handOver gives the housekeeping what a full pass read: its next round
// works with it. A round under way finishes with what it has; only the
// latest view waits.
func (ps *passes) handOver(v passView) {
	for {
		select {
		case ps.views <- v:
			return
		default:
		}
		select {
		case <-ps.views: // an older view nobody took yet
		default:
		}
	}
}

// housekeep runs the housekeeping until ctx is done: a round after each
// full pass, with what that pass read, never at the same time as another
// round. It runs beside the loop's passes, which claim: a round that
// takes minutes (a database full of large or hostile documents, a server
// that scans) delays no claim.
//
// What a round does, and how often (see docs/performance.md):
//   - every round: the counts of queues inserted without them, a batch
//     at a time (fillCounts);
//   - every RefreshEvery: the oldest ready task of each served queue with
//     tasks to do (at most oldestQueues queues, one query each);
//   - every RescueEvery (and the first round): the rescues, which read
//     this node's claimed and running tasks, and the node documents;
//   - every SweepEvery: the sweep;
//   - once a minute: the stats (one bulkWrite; every hour, two more
//     commands delete those past retention);
//   - every RefreshEvery, and when a schedule's time has come: the
//     schedules (two queries), and the tasks of those due;
//   - every RetentionEvery, when some queue has a retention: the
//     retention lease and one find per queue and class (every round
//     while there is more to remove than a round may).
//
// The rescues, sweeps and the retention together make at most
// choresPerPass writes a round; what is left waits for the next round.
func (ps *passes) housekeep(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-ps.views:
			ps.round(ctx, v)
		}
	}
}

// round is one round of housekeeping with what the full pass of v read.
// Each step runs under the pass's deadline; a step that fails does not
// keep the next ones from running. A round that failed is logged when
// that starts and when a round succeeds again, and Ready notes it.
func (ps *passes) round(ctx context.Context, v passView) {
	started := ps.now()
	ps.roundStarted.Store(started.UnixNano())
	defer ps.roundStarted.Store(0)
	ps.chores.refill()
	var failed error
	now := started
	// Every step goes by the round's start: a step due every d runs in
	// rounds that start at least d apart.
	step := func(name string, due bool, f func(ctx context.Context, now time.Time) error) {
		if !due || ctx.Err() != nil {
			return
		}
		ps.houseStep.Store(&name)
		sctx, cancel := context.WithTimeout(ctx, passLimit)
		defer cancel()
		ps.chores.step(time.Now())
		began := ps.now()
		err := f(sctx, now)
		ps.metrics.PassSeconds.WithLabelValues("housekeeping").Observe(ps.now().Sub(began).Seconds())
		if err != nil {
			if failed == nil && ctx.Err() == nil {
				failed = err
			}
			return
		}
		ps.house.mark(name, ps.now())
	}
	step("counts", true, func(ctx context.Context, _ time.Time) error { return ps.fillCounts(ctx, v.queues, v.read) })
	step("oldest", now.Sub(ps.oldestAt) >= ps.params.RefreshEvery && ps.oldestPace.ready(), func(ctx context.Context, now time.Time) error {
		ps.oldestAt = now // tried: a metric is not worth a step every round
		return ps.measureOldest(ctx, v.measure, now)
	})
	step("rescue", ps.rescuer.due(now), func(ctx context.Context, now time.Time) error {
		sent := ps.now()
		held, err := ps.store.Held(ctx, ps.params.Name, false)
		if err != nil {
			return err
		}
		ps.held.read(held, sent, v.byID.request)
		nodes, err := ps.rescuer.run(ctx, held, v.byID, now)
		if !nodes.at.IsZero() {
			ps.sweeper.noteOffers(nodes)
		}
		return err
	})
	step("sweep", ps.sweeper.due(now), func(ctx context.Context, now time.Time) error {
		return ps.sweeper.sweep(ctx, v.serve, now)
	})
	step("stats", ps.stats.due(now), func(ctx context.Context, now time.Time) error {
		_, total := ps.held.counts()
		ps.stats.flush(ctx, now, v.queues, v.running.Queue, total)
		return nil
	})
	step("schedules", ps.schedules.due(now), func(ctx context.Context, now time.Time) error {
		return ps.schedules.fire(ctx, now)
	})
	step("retention", ps.retention.due(now), func(ctx context.Context, now time.Time) error {
		return ps.retention.run(ctx, v.queues, now)
	})
	if ctx.Err() != nil {
		return
	}
	if failed != nil {
		msg := failed.Error()
		ps.houseProblem.Store(&msg)
		if ps.notes.set("housekeeping", "") {
			what := "MongoDB failed a housekeeping step"
			if queue.IsDocumentError(failed) {
				what = "a document den cannot read stopped a housekeeping step (MongoDB answered)"
			} else if errors.Is(failed, context.DeadlineExceeded) {
				what = "a housekeeping step took longer than its 1-minute limit"
			}
			ps.log.Warn(what+"; claims go on, and the housekeeping tries again after the next pass", zap.Error(failed))
		}
		return
	}
	ps.houseProblem.Store(nil)
	if ps.notes.clear("housekeeping") {
		ps.log.Info("housekeeping completes its rounds again")
	}
	ps.beat.lastRound.Store(&queue.Housekeeping{Pass: v.at, Started: started, Ended: ps.now()})
}
