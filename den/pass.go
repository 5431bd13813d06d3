package den

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// passes are the loop's passes. A full pass, every interval, reads the
// queues (and which of them this node serves), fills in missing counts,
// writes the node document (heartbeat), carries out cancellations, now and
// then rescues and sweeps, and claims. A claim-only pass, when a slot frees
// or a task arrives, claims with what the last full pass read. Each pass
// runs under a deadline; a failed pass is an outage, or a document den
// cannot read, and what Ready says until a full pass succeeds.
type passes struct {
	*common
	plugins *plugins.Registry
	claimer *claimer
	beat    *heartbeat
	sweeper *sweeper
	rescuer *rescuer
	runners *runners
	// schedules fires the schedules whose time has come.
	schedules *scheduler
	// stats writes the status page's time series once a minute.
	stats *statsRecorder
	// retention removes ended tasks past their retention.
	retention *retention
	// held is what this node holds (the claimer's): a pass reads it from
	// the database, and metrics count it.
	held *heldTasks
	// chores is the budget of housekeeping writes each full pass refills.
	chores *chores

	// shared is the config collection's active document as last read, at
	// sharedAt.
	shared   *queue.SharedConfig
	sharedAt time.Time
	// clockAt is when the clock was last synced with the server.
	clockAt time.Time
	// lastProbe is when claims last probed the queues found empty.
	lastProbe time.Time
	// fillBatch is how many queues' counts the next pass fills in
	// (fillCounts).
	fillBatch int
	// oldestAt is when the oldest ready tasks were last measured
	// (measureOldest).
	oldestAt   time.Time
	oldestPace pace

	// lastPassOK is when a full pass last succeeded (UnixNano); outage is
	// what Ready says while passes fail (MongoDB unreachable or failing,
	// or a document den cannot read: see setOutage), nil while they
	// succeed.
	lastPassOK atomic.Int64
	outage     atomic.Pointer[string]
	// queueNames maps the queues of the last full pass to their names,
	// and queueTodo their names to their count_todo, for metrics read
	// outside the loop.
	queueNames atomic.Pointer[map[bson.ObjectID]string]
	queueTodo  atomic.Pointer[map[string]int64]
}

// full is one full pass of the loop: it reads the queues, writes the node
// document, carries out cancellations, now and then rescues the tasks of
// dead runners and dead nodes and sweeps malformed tasks, and claims
// (read). A MongoDB failure ends the pass; it is logged when the outage
// starts and when it ends, and a full pass that succeeds ends it.
func (ps *passes) full(ctx context.Context) {
	ps.runners.retireIdle(false)
	stopped, slow, err := ps.timed(ctx, "full", ps.read)
	if stopped || slow {
		return
	}
	if ps.notes.clear("slow") {
		ps.log.Info("passes finish in time again")
	}
	if err != nil {
		ps.setOutage(err)
		return
	}
	ps.lastPassOK.Store(ps.now().UnixNano())
	ps.outage.Store(nil)
	ps.metrics.Outage.Set(0)
	if ps.notes.clear("outage") {
		ps.log.Info("MongoDB reachable again")
	}
	if ps.notes.clear("document-fault") {
		ps.log.Info("passes read every document again")
	}
}

// claimOnly is a short pass: a runner has exited, so a slot is free, and
// the node claims at once with what the last full pass read. It can tell
// that an outage or slowness starts, not that it is over: only a full
// pass can.
func (ps *passes) claimOnly(ctx context.Context) {
	stopped, slow, err := ps.timed(ctx, "claim", func(ctx context.Context) error {
		if ps.claimer.paused() {
			return nil
		}
		return ps.claimer.claim(ctx, false)
	})
	if !stopped && !slow && err != nil {
		ps.setOutage(err)
	}
}

// timed runs one pass of kind (full, claim) under the pass's deadline,
// so that one hung connection cannot stop the heartbeat for good, and
// counts it (den_loop_pass_duration_seconds, den_database_errors_total).
// stopped: the node is stopping, and nothing more is to be said; slow:
// the pass ran out of time, which it logs once (slow, not necessarily
// unreachable).
func (ps *passes) timed(ctx context.Context, kind string, pass func(context.Context) error) (stopped, slow bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := ps.now()
	err = pass(pctx)
	if ctx.Err() != nil {
		return true, false, err
	}
	ps.metrics.PassSeconds.WithLabelValues(kind).Observe(ps.now().Sub(started).Seconds())
	if err != nil {
		ps.metrics.DBErrors.Inc()
	}
	if err != nil && outOfTime(pctx, err, time.Now()) {
		if ps.notes.set("slow", "") {
			ps.log.Warn("a pass took longer than its 1-minute limit; the node stays alive and goes on (large documents or a slow server?)",
				zap.Duration("took", ps.now().Sub(started)), zap.Error(err))
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
		ps.outage.Store(&msg)
		if ps.notes.set("document-fault", "") {
			ps.log.Warn("a document den cannot read stopped a pass; retrying every interval", zap.Error(err))
		}
		return
	}
	msg := "MongoDB unreachable or failing: " + err.Error()
	ps.outage.Store(&msg)
	ps.metrics.Outage.Set(1)
	if ps.notes.set("outage", "") {
		ps.log.Warn("MongoDB unreachable or failing; keeping runners and retrying every interval", zap.Error(err))
	}
}

// read is the work of a full pass. What it reads, and how often, is chosen so that an
// idle node costs the database about 3 commands a second however many
// queues there are (see docs/performance.md):
//   - every pass: the queues (count_todo tells of new work), the node
//     document, and, while this node holds tasks, its own claimed and
//     running tasks (their cancel flags, and what it holds);
//   - every ClockEvery: the server's time (hello);
//   - every RefreshEvery: the config collection, and the claimed and
//     running counts of all nodes (tasks_doing in the node document; every
//     pass while a queue-wide threads limit is in play);
//   - every ProbeEvery: one query for work in queues found empty;
//   - every RefreshEvery: the oldest ready task of each served queue with
//     tasks to do (at most oldestQueues queues, one query each);
//   - every RefreshEvery, and when a schedule's time has come: the
//     schedules (two queries), and the tasks of those due;
//   - every RescueEvery and SweepEvery: rescues and sweeps;
//   - once a minute: the stats (one bulkWrite; every hour, two more
//     commands delete those past retention).
//   - every RetentionEvery, when some queue has a retention: the
//     retention lease and one find per queue and class (every pass while
//     there is more to remove than a pass may).
func (ps *passes) read(ctx context.Context) error {
	now := ps.now()
	if now.Sub(ps.clockAt) >= ps.cfg.ClockEvery {
		// The server's time again: a clock this host's monotonic clock
		// counts on drifts a little.
		if err := ps.store.SyncClock(ctx, ps.clock); err != nil {
			return err
		}
		ps.clockAt = now
	}
	if ps.shared == nil || now.Sub(ps.sharedAt) >= ps.cfg.RefreshEvery {
		shared, err := ps.store.ActiveConfig(ctx)
		if err != nil {
			return err // never fall back to serving every queue
		}
		ps.shared, ps.sharedAt = &shared, now
		if len(shared.Problems) > 0 {
			if ps.notes.set("config", strings.Join(shared.Problems, "; ")) {
				ps.log.Warn("config collection: bad fields in the active document", zap.Strings("problems", shared.Problems))
			}
		} else if ps.notes.clear("config") {
			ps.log.Info("config collection: active document is valid again")
		}
	}
	filter, gfs := ps.effective(*ps.shared)

	queues, malformed, err := ps.store.Queues(ctx)
	if err != nil {
		return err
	}
	ps.noteMalformedQueues(malformed)
	serve := ps.serveable(queues, filter)
	if err := ps.fillCounts(ctx, queues); err != nil {
		return err
	}

	ps.chores.refill()
	rescueDue := ps.rescuer.due(now)
	var held []queue.Task
	if ps.held.any() || rescueDue {
		sent := ps.now()
		if held, err = ps.store.Held(ctx, ps.cfg.Name, false); err != nil {
			return err
		}
		ps.held.read(held, sent, func(t queue.Task) queue.Resources {
			for _, q := range queues {
				if q.ID == t.Queue {
					return requestOf(t.Control.Requested, q)
				}
			}
			return requestOf(t.Control.Requested, queue.Queue{})
		})
	}
	if err := ps.claimer.countRunning(ctx, queues, serve, now); err != nil {
		return err
	}
	if err := ps.measureOldest(ctx, serve, now); err != nil {
		return err
	}

	names := make(map[bson.ObjectID]string, len(queues))
	todo := make(map[string]int64, len(queues))
	for _, q := range queues {
		names[q.ID] = q.Name
		if q.CountTodo != nil {
			todo[q.Name] += *q.CountTodo
		}
	}
	ps.queueNames.Store(&names)
	ps.queueTodo.Store(&todo)
	limit, problem, err := ps.beat.write(ctx, queues, serve, now)
	if err != nil {
		return err
	}
	if problem != "" {
		if ps.notes.set("node-maxthreads", problem) {
			ps.log.Warn("node document: " + problem)
		}
	} else if ps.notes.clear("node-maxthreads") {
		ps.log.Info("node document: maxthreads is valid again")
	}

	byID := make(map[bson.ObjectID]queue.Queue, len(queues))
	for _, q := range queues {
		byID[q.ID] = q
	}
	if err := ps.sweeper.cancel(ctx, held, byID); err != nil {
		return err
	}
	if held != nil {
		ps.runners.askLive(held, now)
	}
	if rescueDue {
		if err := ps.rescuer.run(ctx, held, byID, now); err != nil {
			return err
		}
	}
	if ps.sweeper.due(now) {
		if err := ps.sweeper.sweep(ctx, serve, now); err != nil {
			return err
		}
	}

	if ps.stats.due(now) {
		_, total := ps.held.counts()
		ps.stats.flush(ctx, now, queues, ps.claimer.running.Queue, total)
	}

	if ps.schedules.due(now) {
		if err := ps.schedules.fire(ctx, now); err != nil {
			return err
		}
	}
	if ps.retention.due(now) {
		if err := ps.retention.run(ctx, queues, now); err != nil {
			return err
		}
	}

	ps.claimer.settle(ctx)
	ps.claimer.readPass(serve, limit, gfs, byID)
	if ps.claimer.paused() {
		return nil
	}
	probe := now.Sub(ps.lastProbe) >= ps.cfg.ProbeEvery
	if err := ps.claimer.claim(ctx, probe); err != nil {
		return err
	}
	if probe {
		ps.lastProbe = now
	}
	return nil
}

// choresPerPass is the most housekeeping writes (rescues, sweeps'
// rewrites and fails) one pass makes: the rest wait for the next pass, and
// the pass's claims come first. 10,000 forged tasks of a dead node are
// rescued in 50 passes instead of one pass that never ends.
const choresPerPass = 200

// chores is a full pass's budget of housekeeping writes (choresPerPass),
// which the rescuer and the sweeper take from. Only the loop's goroutine
// uses it.
type chores struct{ left int }

// refill starts a pass's budget.
func (c *chores) refill() { c.left = choresPerPass }

// take reports whether this pass may make one more housekeeping write,
// and counts it.
func (c *chores) take() bool {
	if c.left <= 0 {
		return false
	}
	c.left--
	return true
}

// spent reports whether this pass's budget is used up.
func (c *chores) spent() bool { return c.left <= 0 }

// queueName is the name of queue id as the last full pass read it, else
// fallback.
func (ps *passes) queueName(id bson.ObjectID, fallback string) string {
	if p := ps.queueNames.Load(); p != nil {
		if name, ok := (*p)[id]; ok {
			return name
		}
	}
	return fallback
}

// health is what Ready says of the passes: nil when MongoDB answered the
// last pass and a full pass succeeded within the last 3 intervals (at
// least 3 seconds).
func (ps *passes) health() error {
	if msg := ps.outage.Load(); msg != nil {
		return errors.New(*msg)
	}
	within := max(3*ps.cfg.Interval, 3*time.Second)
	last := ps.lastPassOK.Load()
	if last == 0 {
		return errors.New("no loop pass has succeeded yet")
	}
	if age := ps.now().Sub(time.Unix(0, last)); age > within {
		return fmt.Errorf("last successful loop pass was %s ago (more than %s): passes are slow or stuck", age.Round(time.Millisecond), within)
	}
	return nil
}

// todoByQueue is each queue's count_todo as the last full pass read it, by
// queue name, for den_queue_todo.
func (ps *passes) todoByQueue() map[string]int64 {
	if p := ps.queueTodo.Load(); p != nil {
		return *p
	}
	return nil
}

// runningByQueue is what the node holds (claimed and running tasks), by
// queue name, for den_tasks_running. Every queue of the last full pass is
// listed, at 0 when it holds nothing there, so that a gauge goes back to 0.
func (ps *passes) runningByQueue() map[string]int {
	counts, _ := ps.held.counts()
	out := map[string]int{}
	var names map[bson.ObjectID]string
	if p := ps.queueNames.Load(); p != nil {
		names = *p
	}
	for _, name := range names {
		out[name] += 0
	}
	for id, c := range counts {
		name, ok := names[id]
		if !ok {
			name = id.Hex()
		}
		out[name] += c
	}
	return out
}
