package den

import (
	"context"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// fullPass is one pass of the loop: it reads the queues, writes the node
// document, carries out cancellations, now and then rescues the tasks of
// dead runners and dead nodes and sweeps malformed tasks, and claims
// (pass). A MongoDB failure ends the pass; it is logged when the outage
// starts and when it ends, and a full pass that succeeds ends it.
func (n *Node) fullPass(ctx context.Context) {
	n.runners.retireIdle(false)
	stopped, slow, err := n.timedPass(ctx, "full", n.pass)
	if stopped || slow {
		return
	}
	if n.notes.clear("slow") {
		n.log.Info("passes finish in time again")
	}
	if err != nil {
		n.setOutage(err)
		return
	}
	n.lastPassOK.Store(n.now().UnixNano())
	n.outage.Store(nil)
	n.metrics.Outage.Set(0)
	if n.notes.clear("outage") {
		n.log.Info("MongoDB reachable again")
	}
	if n.notes.clear("document-fault") {
		n.log.Info("passes read every document again")
	}
}

// claimPass is a short pass: a runner has exited, so a slot is free, and
// the node claims at once with what the last full pass read. It can tell
// that an outage or slowness starts, not that it is over: only a full
// pass can.
func (n *Node) claimPass(ctx context.Context) {
	stopped, slow, err := n.timedPass(ctx, "claim", func(ctx context.Context) error {
		if n.claimer.paused() {
			return nil
		}
		return n.claimer.claim(ctx, false)
	})
	if !stopped && !slow && err != nil {
		n.setOutage(err)
	}
}

// timedPass runs one pass of kind (full, claim) under the pass's deadline,
// so that one hung connection cannot stop the heartbeat for good, and
// counts it (den_loop_pass_duration_seconds, den_database_errors_total).
// stopped: the node is stopping, and nothing more is to be said; slow:
// the pass ran out of time, which it logs once (slow, not necessarily
// unreachable).
func (n *Node) timedPass(ctx context.Context, kind string, pass func(context.Context) error) (stopped, slow bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := n.now()
	err = pass(pctx)
	if ctx.Err() != nil {
		return true, false, err
	}
	n.metrics.PassSeconds.WithLabelValues(kind).Observe(n.now().Sub(started).Seconds())
	if err != nil {
		n.metrics.DBErrors.Inc()
	}
	if err != nil && pctx.Err() != nil {
		if n.notes.set("slow", "") {
			n.log.Warn("a pass took longer than its 1-minute limit; the node stays alive and goes on (large documents or a slow server?)",
				zap.Duration("took", n.now().Sub(started)), zap.Error(err))
		}
		return false, true, err
	}
	return false, false, err
}

// setOutage notes that a pass failed on err: MongoDB is unreachable or
// failing until a full pass succeeds. A pass that failed on a document it
// could not read is told apart: that is no outage (the database answered),
// and it is what /readyz then says.
func (n *Node) setOutage(err error) {
	if queue.IsDocumentError(err) {
		msg := "a document den cannot read stopped a pass (MongoDB answered): " + err.Error()
		n.outage.Store(&msg)
		if n.notes.set("document-fault", "") {
			n.log.Warn("a document den cannot read stopped a pass; retrying every interval", zap.Error(err))
		}
		return
	}
	msg := "MongoDB unreachable or failing: " + err.Error()
	n.outage.Store(&msg)
	n.metrics.Outage.Set(1)
	if n.notes.set("outage", "") {
		n.log.Warn("MongoDB unreachable or failing; keeping runners and retrying every interval", zap.Error(err))
	}
}

// pass is a full pass. What it reads, and how often, is chosen so that an
// idle node costs the database about 3 commands a second however many
// queues there are (see docs/performance.md):
//   - every pass: the queues (count_todo tells of new work), the node
//     document, and, while this node holds tasks, its own claimed and
//     running tasks (their cancel flags, and what it holds);
//   - every RefreshEvery: the config collection, and the claimed and
//     running counts of all nodes (tasks_doing in the node document; every
//     pass while a queue-wide threads limit is in play);
//   - every ProbeEvery: one query for work in queues found empty;
//   - every RescueEvery and SweepEvery: rescues and sweeps.
func (n *Node) pass(ctx context.Context) error {
	now := n.now()
	if n.shared == nil || now.Sub(n.sharedAt) >= n.cfg.RefreshEvery {
		shared, err := n.store.ActiveConfig(ctx)
		if err != nil {
			return err // never fall back to serving every queue
		}
		n.shared, n.sharedAt = &shared, now
		if len(shared.Problems) > 0 {
			if n.notes.set("config", strings.Join(shared.Problems, "; ")) {
				n.log.Warn("config collection: bad fields in the active document", zap.Strings("problems", shared.Problems))
			}
		} else if n.notes.clear("config") {
			n.log.Info("config collection: active document is valid again")
		}
	}
	filter, gfs := n.effective(*n.shared)

	queues, bad, err := n.store.Queues(ctx)
	if err != nil {
		return err
	}
	n.noteMalformedQueues(bad)
	serve := n.serveable(queues, filter)
	if err := n.fillCounts(ctx, queues); err != nil {
		return err
	}

	n.chores = choresPerPass
	rescueDue := now.Sub(n.lastRescue) >= n.cfg.RescueEvery
	var held []queue.Task
	if n.claimer.held.any() || rescueDue {
		sent := n.now()
		if held, err = n.store.Held(ctx, n.cfg.Name, false); err != nil {
			return err
		}
		n.claimer.held.read(held, sent, func(t queue.Task) queue.Resources {
			for _, q := range queues {
				if q.ID == t.Queue {
					return requestOf(t.Control.Requested, q)
				}
			}
			return requestOf(t.Control.Requested, queue.Queue{})
		})
	}
	if err := n.claimer.countRunning(ctx, queues, serve, now); err != nil {
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
	n.queueNames.Store(&names)
	n.queueTodo.Store(&todo)
	limit, problem, err := n.beat.write(ctx, queues, serve, now)
	if err != nil {
		return err
	}
	if problem != "" {
		if n.notes.set("node-maxthreads", problem) {
			n.log.Warn("node document: " + problem)
		}
	} else if n.notes.clear("node-maxthreads") {
		n.log.Info("node document: maxthreads is valid again")
	}

	byID := make(map[bson.ObjectID]queue.Queue, len(queues))
	for _, q := range queues {
		byID[q.ID] = q
	}
	if err := n.cancel(ctx, held, byID); err != nil {
		return err
	}
	if held != nil {
		n.runners.askLive(held, now)
	}
	if rescueDue {
		if err := n.rescueStaleClaims(ctx, held, byID, now); err != nil {
			return err
		}
		if err := n.rescueDeadRunners(ctx, held, byID); err != nil {
			return err
		}
		if err := n.rescueDeadNodes(ctx, byID); err != nil {
			return err
		}
		if n.chores > 0 {
			n.lastRescue = now // else the rest next pass, after its claims
		}
	}
	if now.Sub(n.lastSweep) >= n.cfg.SweepEvery {
		if err := n.sweep(ctx, serve, now); err != nil {
			return err
		}
		if n.chores > 0 {
			n.lastSweep = now // else the rest next pass, after its claims
		}
	}

	n.claimer.readPass(serve, limit, gfs, byID)
	if n.claimer.paused() {
		return nil
	}
	probe := now.Sub(n.lastProbe) >= n.cfg.ProbeEvery
	if err := n.claimer.claim(ctx, probe); err != nil {
		return err
	}
	if probe {
		n.lastProbe = now
	}
	return nil
}

// choresPerPass is the most housekeeping writes (rescues, sweeps'
// rewrites and fails) one pass makes: the rest wait for the next pass, and
// the pass's claims come first. 10,000 forged tasks of a dead node are
// rescued in 50 passes instead of one pass that never ends.
const choresPerPass = 200

// chore reports whether this pass may make one more housekeeping write,
// and counts it.
func (n *Node) chore() bool {
	if n.chores <= 0 {
		return false
	}
	n.chores--
	return true
}
