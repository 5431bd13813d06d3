package claim

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/queue"
)

// A queue's rate limit (rate_limit: {starts: N, per: SECONDS}) is held in
// the database, in den's rate_limits collection (queue.RateLimits), so
// that all den nodes together start at most N of the queue's tasks in any
// period of per seconds.
//
// The start is taken after the claim and before the hand-over, by the
// node that holds the task, as the last of the checks that hold across
// nodes (mayStart): a claim that finds no task takes no start, and a
// start is never given back. When the limit refuses, the node puts the
// task back in its queue (status -2, node -1, as a Disbatch node would
// find it) and leaves the queue alone until the time the refusal named,
// when the oldest start in the window leaves it. Taking the start before
// the claim would spend one on every claim that then finds nothing, to be
// given back by a second write; a give-back that failed or was repeated
// could not tell which start it returns. Here every granted start is a
// task handed to a runner, or one put back (under-use, never overshoot).
//
// What counts as a start is that moment, before the hand-over: the
// runner's own start follows it by the runner's start-up time.
//
// The wait a refusal named is read again every full pass while it lasts
// past the next one (recheckRates): a slot deleted or repaired meanwhile,
// or a limit changed, matters within a pass, not when the wait ends. What
// the rate_limits collection holds is untrusted input (queue.RateLimits):
// a document den did not write neither stops a queue nor lets more of its
// tasks start; each one a take put right is logged once, as a warning.

// rateLimited is why a claimed task is put back when its queue's rate
// limit refused its start.
const rateLimited = "the queue's rate limit is reached"

// rateWaiting reports whether queue q waits for its rate limit: a start
// was refused and the time the refusal named has not come.
func (cl *Claimer) rateWaiting(q queue.Queue) bool {
	if q.RateLimit == nil {
		return false
	}
	until, ok := cl.rateWait[q.ID]
	if !ok {
		return false
	}
	if !cl.Now().Before(until) {
		delete(cl.rateWait, q.ID)
		return false
	}
	return true
}

// takeStart takes a start of rate-limited queue q for task id, which this
// node has claimed; false when the limit refuses it, and the queue then
// waits (rateWaiting). The call is not cancelled by shutdown: its reply
// says whether a start was taken. An error leaves it unknown whether the
// start was taken: the caller puts the task back (a start lost, never one
// too many).
func (cl *Claimer) takeStart(ctx context.Context, q queue.Queue, id bson.ObjectID) (bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	g, err := cl.Rates.Take(cctx, q.ID, *q.RateLimit, id, cl.params.Name, cl.Now())
	for _, r := range g.Repaired {
		cl.Log.Warn("rate_limits: a document den did not write as it is was put right", base.QueueField(q.Name),
			zap.String("repair", r))
	}
	if err != nil {
		return false, err
	}
	if !g.OK {
		cl.rateWait[q.ID] = g.Next
		cl.Log.Debug("queue at its rate limit; its tasks wait", base.QueueField(q.Name),
			zap.Stringer("rate_limit", q.RateLimit), zap.Time("until", g.Next))
	}
	return g.OK, nil
}

// recheckRates reads again, with one query, the slots of the queues whose
// rate limit refused a start and whose wait lasts past the next full pass
// (at is this pass's start): a queue no longer at its limit (a slot
// deleted, a limit raised or removed) is claimed from in this pass, and a
// wait that moved is kept as the slots now say. A queue no longer served,
// or no longer limited, waits no more. It costs nothing while no queue
// waits that long.
func (cl *Claimer) recheckRates(ctx context.Context, at time.Time) error {
	if len(cl.rateWait) == 0 {
		return nil
	}
	limits := map[bson.ObjectID]queue.RateLimit{}
	served := map[bson.ObjectID]bool{}
	for _, q := range cl.pass.serve {
		served[q.ID] = q.RateLimit != nil
		if until, ok := cl.rateWait[q.ID]; ok && q.RateLimit != nil && until.After(at.Add(cl.params.Interval)) {
			limits[q.ID] = *q.RateLimit
		}
	}
	for id := range cl.rateWait {
		if !served[id] {
			delete(cl.rateWait, id)
		}
	}
	if len(limits) == 0 {
		return nil
	}
	next, err := cl.Rates.NextStarts(ctx, limits, cl.Now())
	if err != nil {
		return err
	}
	for id := range limits {
		if until, ok := next[id]; ok {
			cl.rateWait[id] = until
		} else {
			delete(cl.rateWait, id)
		}
	}
	return nil
}
