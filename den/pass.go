package den

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/internal/claim"
	"github.com/den-project/den/den/internal/heartbeat"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// passesParams is what the loop's passes read of the configuration.
type passesParams struct {
	Name                     string
	Interval                 time.Duration
	RefreshEvery, ClockEvery time.Duration
	ProbeEvery               time.Duration
	ActiveQueues             []string
	IgnoreQueues             []string
	GFS                      string
	PluginConfig             map[string]json.RawMessage
}

// passes are the loop's passes, and its housekeeping. A full pass, every
// interval, reads the queues (and which of them this node serves), writes
// the node document (heartbeat), claims, and carries out the cancellations
// of the tasks it holds. A claim-only pass, when a slot frees or a task
// arrives, claims with what the last full pass read. Each pass runs under a
// deadline; a failed pass is an outage, or a document den cannot read, and
// what Ready says until a full pass succeeds.
//
// The housekeeping (housekeeping.go: counts to fill in, rescues, sweeps,
// stats, schedules, retention) runs in a goroutine of its own, a round
// after each full pass with what that pass read, so that no claim waits
// behind it: its queries can take minutes on a database full of large or
// hostile documents.
type passes struct {
	*base.Env
	params  passesParams
	plugins *plugins.Registry
	// claimer claims (the claim-only pass, and a full pass's claims
	// step); beat writes the node document; pool's idle runners retire
	// at each full pass. The other components are called on by the steps
	// that need them (fullPassSteps, houseSteps), not by the passes.
	claimer *claim.Claimer
	beat    *heartbeat.Beat
	pool    *runners.Pool
	// held is what this node holds (the claimer's): a pass reads it from
	// the database, and metrics count it.
	held *held.Tasks
	// chores is the budget of housekeeping writes each round refills.
	chores *chore.Budget

	// shared is the config collection's active document as last read, at
	// sharedAt.
	shared   *queue.SharedConfig
	sharedAt time.Time
	// clockAt is when the clock was last synced with the server.
	clockAt time.Time
	// probed is what the probe step keeps between passes (probe.go).
	probed probeState
	// heldRead is set once a full pass has read what this node holds:
	// the first pass reads it before it claims, the others while the
	// node holds tasks (their cancel flags).
	heldRead bool

	// passSteps are a full pass's steps (fullPassSteps), and roundSteps
	// a round's of the housekeeping (houseSteps), in their order.
	passSteps  []step[fullPass]
	roundSteps []namedStep

	// views hands the housekeeping what the last full pass read.
	views chan passView

	// health is what Ready goes by (progress.go): the loop's and the
	// housekeeping's progress, written by them, read by any goroutine.
	health *health
	// book is what the loop knows of the queues (queuebook.go);
	// lastQueues are those of its last read of every queue, for metrics
	// and the pool, read outside the loop (shared with the pool).
	book       queueBook
	lastQueues *queuesRead
}

// probeState is what the probe step keeps between passes: when it last
// ran, the pace that keeps it to its share of the database's time, and
// the queues it found tasks in that are no queue (gone, or no queue
// document den can read), left out of its queries until the next read of
// every queue (skip).
type probeState struct {
	last time.Time
	pace chore.Pace
	skip map[bson.ObjectID]bool
}

// full is one full pass of the loop: it reads the queues, writes the node
// document, claims and carries out cancellations (read), then hands what
// it read to the housekeeping. A MongoDB failure ends the pass; it is
// logged when the outage starts and when it ends, and a full pass that
// succeeds ends it.
func (ps *passes) full(ctx context.Context) {
	ps.pool.RetireIdle(false)
	started := ps.Now()
	ps.health.passStarted.Store(started.UnixNano())
	stopped, slow, err := ps.timed(ctx, "full", ps.read)
	ps.health.passStarted.Store(0)
	if stopped || slow {
		return
	}
	if ps.Notes.Clear("slow") {
		ps.Log.Info("passes finish in time again")
	}
	if err != nil {
		ps.setOutage(err)
		return
	}
	now := ps.Now()
	ps.health.lastPassOK.Store(now.UnixNano())
	ps.health.lastPassTook.Store(int64(now.Sub(started)))
	ps.health.loop.Mark("full pass", now)
	ps.Signals.NotePassDone(started)
	ps.health.outage.Store(nil)
	ps.Metrics.Outage.Set(0)
	if ps.Notes.Clear("outage") {
		ps.Log.Info("MongoDB reachable again")
	}
	if ps.Notes.Clear("document-fault") {
		ps.Log.Info("passes read every document again")
	}
}

// claimOnly is a short pass: a runner has exited, so a slot is free, and
// the node claims at once with what the last full pass read. It can tell
// that an outage or slowness starts, not that it is over: only a full
// pass can.
func (ps *passes) claimOnly(ctx context.Context) {
	stopped, slow, err := ps.timed(ctx, "claim", func(ctx context.Context) error {
		if ps.claimer.Paused() {
			return nil
		}
		return ps.claimer.Claim(ctx)
	})
	if !stopped && !slow && err != nil {
		ps.setOutage(err)
	}
}

// passLimit is how long a pass, or a step of the housekeeping, may take:
// one hung connection cannot stop the loop for good.
const passLimit = time.Minute

// timed runs one pass of kind (full, claim) under the pass's deadline,
// so that one hung connection cannot stop the heartbeat for good, and
// counts it (den_loop_pass_duration_seconds, den_database_errors_total).
// stopped: the node is stopping, and nothing more is to be said; slow:
// the pass ran out of time, which it logs once (slow, not necessarily
// unreachable).
func (ps *passes) timed(ctx context.Context, kind string, pass func(context.Context) error) (stopped, slow bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, passLimit)
	defer cancel()
	started := ps.Now()
	err = pass(pctx)
	if ctx.Err() != nil {
		return true, false, err
	}
	ps.Metrics.PassSeconds.WithLabelValues(kind).Observe(ps.Now().Sub(started).Seconds())
	if err != nil {
		ps.Metrics.DBErrors.Inc()
	}
	if err != nil && outOfTime(pctx, err, time.Now()) {
		if ps.Notes.Set("slow", "") {
			ps.Log.Warn("a pass took longer than its 1-minute limit; the node stays alive and goes on (large documents or a slow server?)",
				zap.Duration("took", ps.Now().Sub(started)), zap.Error(err))
		}
		return false, true, err
	}
	return false, false, err
}

// outOfTime reports whether a pass that failed on err ran out of the time
// ctx gave it. Its context says so once its timer has fired; but a
// connection's read deadline is the context's deadline too, and on a
// loaded machine the read can time out before the timer runs, leaving a
// deadline error under a context that does not say it is done yet. That
// is a slow pass, not an outage.
func outOfTime(ctx context.Context, err error, now time.Time) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && (errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err)) && !now.Before(deadline)
}

// setOutage notes that a pass failed on err: MongoDB is unreachable or
// failing until a full pass succeeds. A pass that failed on a document it
// could not read is told apart: that is no outage (the database answered),
// and it is what /readyz then says.
func (ps *passes) setOutage(err error) {
	if queue.IsDocumentError(err) {
		msg := "a document den cannot read stopped a pass (MongoDB answered): " + err.Error()
		ps.health.outage.Store(&msg)
		if ps.Notes.Set("document-fault", "") {
			ps.Log.Warn("a document den cannot read stopped a pass; retrying every interval", zap.Error(err))
		}
		return
	}
	msg := "MongoDB unreachable or failing: " + err.Error()
	ps.health.outage.Store(&msg)
	ps.Metrics.Outage.Set(1)
	if ps.Notes.Set("outage", "") {
		ps.Log.Warn("MongoDB unreachable or failing; keeping runners and retrying every interval", zap.Error(err))
	}
}

// read is the work of a full pass: it walks the pass's steps
// (fullPassSteps, steps.go): what a claim needs, the claims, and the
// cancellations of what the node holds; the rest is the housekeeping's
// (housekeeping.go). What it reads, and how often, is
// chosen so that an idle node costs the database about 3 commands a
// second however many queues there are (see docs/performance.md):
//   - every pass: the queues with work by their counts, those that had
//     work, and the new ones (count_todo tells of new work: queueBook),
//     the node document, and, while this node holds tasks (and once at
//     start, before it claims), its own claimed and running tasks (their
//     cancel flags, and what it holds);
//   - every ClockEvery: the server's time (hello);
//   - every RefreshEvery: the config collection, and the claimed and
//     running counts of all nodes (tasks_doing in the node document; every
//     pass while a queue-wide threads limit is in play);
//   - every 6 RefreshEvery (and when the queues the node serves change):
//     every queue;
//   - every ProbeEvery (every pass by default), while the node has a
//     free slot and within the probe's share of the database's time: one
//     query for work no count tells of (probe.go).
func (ps *passes) read(ctx context.Context) error {
	p := &fullPass{at: ps.Now(), first: !ps.heldRead}
	for _, s := range ps.passSteps {
		if !s.due(p) {
			continue
		}
		if err := s.do(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// choresTime is how long one step of a housekeeping round may go on
// taking chores (chore.Budget.StepTime).
const choresTime = passLimit / 2

// todoByQueue is each queue's count_todo as the last full pass read it, by
// queue name, for den_queue_count_todo (made when /metrics is read, not every
// pass).
func (ps *passes) todoByQueue() map[string]int64 {
	p := ps.lastQueues.Load()
	if p == nil {
		return nil
	}
	todo := make(map[string]int64, len(*p))
	for _, q := range *p {
		if q.CountTodo != nil {
			todo[q.Name] += *q.CountTodo
		}
	}
	return todo
}

// runningByQueue is what the node holds (claimed and running tasks), by
// queue name, for den_tasks_running. Every queue of the last full pass is
// listed, at 0 when it holds nothing there, so that a gauge goes back to 0.
func (ps *passes) runningByQueue() map[string]int {
	counts, _ := ps.held.Counts()
	out := map[string]int{}
	var queues queue.ByID
	if p := ps.lastQueues.Load(); p != nil {
		queues = *p
	}
	for _, q := range queues {
		out[q.Name] += 0
	}
	for id, c := range counts {
		name := id.Hex()
		if q, ok := queues[id]; ok {
			name = q.Name
		}
		out[name] += c
	}
	return out
}
