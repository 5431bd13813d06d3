package den

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/countfill"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/den/internal/oldest"
	"github.com/den-project/den/den/internal/rescue"
	"github.com/den-project/den/den/internal/retention"
	"github.com/den-project/den/den/internal/schedule"
	"github.com/den-project/den/den/internal/stats"
	"github.com/den-project/den/den/internal/sweep"
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
	byID          queue.ByID
	read          time.Time
	// running are the claimed and running counts of all nodes, as last
	// counted (the claimer replaces the map, never changes it).
	running queue.Running
	// measure are the served queues whose oldest ready task the
	// housekeeping measures (claimer.withWork).
	measure []queue.Queue
}

// round is what a round of housekeeping's steps work with: the view of
// the full pass it follows, and when the round started (every step goes
// by it).
type round struct {
	view passView
	at   time.Time
}

// namedStep is a step of the housekeeping with the name that Ready and
// the node's progress give it.
type namedStep struct {
	name string
	step[round]
}

// roundStep runs step s of round r under the pass's deadline, with the
// budget of writes' time for its step, and counts it.
func (ps *passes) roundStep(ctx context.Context, s namedStep, r *round) error {
	ps.health.houseStep.Store(&s.name)
	sctx, cancel := context.WithTimeout(ctx, passLimit)
	defer cancel()
	ps.chores.Step(time.Now())
	began := ps.Now()
	err := s.do(sctx, r)
	ps.Metrics.PassSeconds.WithLabelValues("housekeeping").Observe(ps.Now().Sub(began).Seconds())
	if err != nil {
		return err
	}
	ps.health.house.Mark(s.name, ps.Now())
	ps.Signals.NoteStepDone(s.name)
	return nil
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
// What a round does (its steps: houseSteps), and how often (see
// docs/performance.md):
//   - every round: the counts of queues inserted without them, a batch
//     at a time (countfill.Filler);
//   - every RefreshEvery: the oldest ready task of each served queue with
//     tasks to do (at most oldest.Queues queues, one query each);
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
	started := ps.Now()
	ps.health.roundStarted.Store(started.UnixNano())
	defer ps.health.roundStarted.Store(0)
	ps.chores.Refill()
	// Every step goes by the round's start: a step due every d runs in
	// rounds that start at least d apart.
	r := &round{view: v, at: started}
	var failed error
	for _, s := range ps.roundSteps {
		if ctx.Err() != nil {
			break
		}
		if !s.due(r) {
			continue
		}
		if err := ps.roundStep(ctx, s, r); err != nil && failed == nil && ctx.Err() == nil {
			failed = err
		}
	}
	if ctx.Err() != nil {
		return
	}
	if failed != nil {
		msg := failed.Error()
		ps.health.houseProblem.Store(&msg)
		if ps.Notes.Set("housekeeping", "") {
			what := "MongoDB failed a housekeeping step"
			if queue.IsDocumentError(failed) {
				what = "a document den cannot read stopped a housekeeping step (MongoDB answered)"
			} else if errors.Is(failed, context.DeadlineExceeded) {
				what = "a housekeeping step took longer than its 1-minute limit"
			}
			ps.Log.Warn(what+"; claims go on, and the housekeeping tries again after the next pass", zap.Error(failed))
		}
		return
	}
	ps.health.houseProblem.Store(nil)
	if ps.Notes.Clear("housekeeping") {
		ps.Log.Info("housekeeping completes its rounds again")
	}
	ps.beat.LastRound.Store(&queue.Housekeeping{Pass: v.at, Started: started, Ended: ps.Now()})
}

// houseSteps are the steps of a round of housekeeping, in the order it
// takes them (see housekeep for how often each is due). The counts and
// the oldest ready tasks are the passes' own; the other steps call on
// the component that does the work, which the passes do not hold.
func houseSteps(ps *passes, rescuer *rescue.Rescuer, sweeper *sweep.Sweeper, stats *stats.Recorder, schedules *schedule.Scheduler, retention *retention.Retention) []namedStep {
	return []namedStep{
		{"counts", fillCounts{&countfill.Filler{Env: ps.Env, Interval: ps.params.Interval}}},
		{"oldest", measureOldest{&oldest.Meter{Env: ps.Env, Every: ps.params.RefreshEvery}}},
		{"rescue", rescueStep{ps.Env, ps.params.Name, ps.held, rescuer, sweeper}},
		{"sweep", sweepStep{sweeper}},
		{"stats", flushStats{ps.held, stats}},
		{"schedules", fireSchedules{schedules}},
		{"retention", retire{retention}},
	}
}

// fillCounts fills in the counts of queues inserted without them, every
// round.
type fillCounts struct{ filler *countfill.Filler }

func (fillCounts) due(*round) bool { return true }

func (s fillCounts) do(ctx context.Context, r *round) error {
	return s.filler.Fill(ctx, r.view.queues, r.view.read)
}

// measureOldest measures how long each served queue's oldest ready task
// has waited (a metric).
type measureOldest struct{ meter *oldest.Meter }

func (s measureOldest) due(r *round) bool { return s.meter.Due(r.at) }

func (s measureOldest) do(ctx context.Context, r *round) error {
	return s.meter.Measure(ctx, r.view.measure, r.at)
}

// rescueStep reads what this node (name) holds and rescues what needs it
// (the rescuer), then hands the sweeper the node documents it read.
type rescueStep struct {
	*base.Env
	name    string
	held    *held.Tasks
	rescuer *rescue.Rescuer
	sweeper *sweep.Sweeper
}

func (s rescueStep) due(r *round) bool { return s.rescuer.Due(r.at) }

func (s rescueStep) do(ctx context.Context, r *round) error {
	sent := s.Now()
	held, err := s.Store.Held(ctx, s.name, false)
	if err != nil {
		return err
	}
	s.held.Read(held, sent, r.view.byID.Request)
	nodes, err := s.rescuer.Run(ctx, held, r.view.byID, r.at)
	if !nodes.At.IsZero() {
		s.sweeper.NoteOffers(nodes)
	}
	return err
}

// sweepStep is the sweeper's sweep of the served queues.
type sweepStep struct{ sweeper *sweep.Sweeper }

func (s sweepStep) due(r *round) bool { return s.sweeper.Due(r.at) }

func (s sweepStep) do(ctx context.Context, r *round) error {
	return s.sweeper.Sweep(ctx, r.view.serve, r.at)
}

// flushStats writes the status page's time series, with what the node
// holds.
type flushStats struct {
	held  *held.Tasks
	stats *stats.Recorder
}

func (s flushStats) due(r *round) bool { return s.stats.Due(r.at) }

func (s flushStats) do(ctx context.Context, r *round) error {
	_, total := s.held.Counts()
	s.stats.Flush(ctx, r.at, r.view.queues, r.view.running.Queue, total)
	return nil
}

// fireSchedules fires the schedules whose time has come.
type fireSchedules struct{ schedules *schedule.Scheduler }

func (s fireSchedules) due(r *round) bool { return s.schedules.Due(r.at) }

func (s fireSchedules) do(ctx context.Context, r *round) error {
	return s.schedules.Fire(ctx, r.at)
}

// retire removes ended tasks past their retention.
type retire struct{ retention *retention.Retention }

func (s retire) due(r *round) bool { return s.retention.Due(r.at) }

func (s retire) do(ctx context.Context, r *round) error {
	return s.retention.Run(ctx, r.view.queues, r.at)
}
