package retention

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// Params is what the retention reads of the configuration.
type Params struct {
	Name           string
	Retention      queue.Retention
	RetentionEvery time.Duration
	// OnBatch, when set, is called before (true) and after (false) each
	// batch (den.Config.OnRetentionBatch; tests only).
	OnBatch func(start bool)
}

// retentionLease is the lease (package queue, the leases collection)
// that lets one node at a time remove ended tasks past their retention.
const retentionLease = "retention"

// retentionPerPass is the most tasks one pass removes: with the sweeps'
// and rescues' writes, no more than the pass's chores budget.
const retentionPerPass = chore.PerRound

// retentionLeaseFor is how long the retention lease lasts unless renewed
// (at least; twice RetentionEvery when that is longer); a batch ends
// retentionMargin before it, so that a node whose lease ran out has
// stopped before another can take it.
const (
	retentionLeaseFor = 2 * time.Minute
	retentionMargin   = 30 * time.Second
)

// retention removes ended tasks past their retention: each queue's own
// (its retention field), else the node's default (Config.Retention),
// which keeps everything unless configured. Every RetentionEvery, when
// some queue's retention removes anything, it takes (or renews) the
// retention lease, and the node that holds it removes, oldest first, up
// to what is left of the pass's chores budget; while it finds more, it
// goes on the next pass. With no retention anywhere it costs nothing; an
// idle one costs a lease update and one find per queue and class every
// RetentionEvery.
type Retention struct {
	*base.Env
	Params Params
	Chores *chore.Budget
	// looked is when it last went through every queue; busy, that it
	// stopped before the end (the budget ran out) and goes on next pass.
	looked time.Time
	busy   bool
	// after is, for each queue and class a pass stopped in, the last task
	// it read: the next pass goes on after it.
	after map[retentionKey]bson.ObjectID
	// until is when this node's lease runs out (zero: it holds none).
	until time.Time
}

type retentionKey struct {
	queue bson.ObjectID
	class string
}

// due reports whether a pass should look for tasks to remove.
func (r *Retention) Due(now time.Time) bool {
	return r.busy || now.Sub(r.looked) >= r.Params.RetentionEvery
}

// run removes what this pass may of the ended tasks past their retention
// in queues, if this node holds (or takes) the lease.
func (r *Retention) Run(ctx context.Context, queues []queue.Queue, now time.Time) error {
	type plan struct {
		q   queue.Queue
		ret queue.Retention
	}
	var plans []plan
	seen := map[string]bool{}
	for _, q := range queues {
		if q.RetentionProblem != "" {
			key := "retention " + q.ID.Hex()
			seen[key] = true
			if r.Notes.Set(key, q.RetentionProblem) {
				r.Log.Warn("a queue's retention cannot be read; its tasks are kept until it is fixed (den queue set Q retention.succeeded=7d ...)",
					zap.String("queue", metrics.Label(q.Name)), zap.String("queue_id", q.ID.Hex()), zap.String("problem", q.RetentionProblem))
			}
			continue
		}
		if ret := q.Retention.Over(r.Params.Retention); ret.Removes() {
			plans = append(plans, plan{q, ret})
		}
	}
	for _, key := range r.Notes.Keep("retention ", seen) {
		r.Log.Info("a queue's retention can be read again, or the queue is gone", zap.String("queue_id", key[len("retention "):]))
	}
	if len(plans) == 0 {
		r.looked, r.busy = now, false
		return r.release(ctx, now)
	}
	until, held, err := r.Store.TakeLease(ctx, retentionLease, r.Params.Name, now, max(retentionLeaseFor, 2*r.Params.RetentionEvery))
	if err != nil {
		return err
	}
	if !held {
		if !r.until.IsZero() {
			r.Log.Info("another node holds the retention lease now")
		}
		r.until, r.looked, r.busy, r.after = time.Time{}, now, false, nil
		return nil
	}
	if r.until.IsZero() {
		r.Log.Info("this node holds the retention lease: it removes ended tasks past their retention")
	}
	r.until = until
	bctx, cancel := context.WithDeadline(ctx, until.Add(-retentionMargin))
	defer cancel()
	if r.after == nil {
		r.after = map[retentionKey]bson.ObjectID{}
	}
	stopped := false
	for _, p := range plans {
		for _, class := range queue.RetentionClasses {
			keep := p.ret.Keep[class]
			if keep <= 0 {
				continue
			}
			if r.Chores.Spent() {
				stopped = true
				break
			}
			key := retentionKey{p.q.ID, class}
			more, err := r.batch(bctx, p.q, class, p.ret, now.Add(-keep), key)
			if err != nil {
				return err
			}
			stopped = stopped || more
		}
	}
	r.busy = stopped
	if !stopped {
		r.looked, r.after = now, nil
	}
	return nil
}

// batch removes one batch of q's tasks of class that ended before
// cutoff, as many as the chores budget leaves, after the last task the
// previous batch read. It reports whether more may follow.
func (r *Retention) batch(ctx context.Context, q queue.Queue, class string, ret queue.Retention, cutoff time.Time, key retentionKey) (bool, error) {
	f := queue.ClassFilter(q.ID, class, cutoff)
	f.AfterID = r.after[key]
	f.Limit = int64(min(retentionPerPass, r.Chores.Left()))
	tasks, read, last, err := r.Store.RetirePage(ctx, f)
	if err != nil {
		return false, err
	}
	more := int64(read) == f.Limit
	if more {
		r.after[key] = last
	} else {
		delete(r.after, key)
	}
	for range max(len(tasks), 1) {
		r.Chores.Take()
	}
	if len(tasks) == 0 {
		return more, nil
	}
	action := ret.Action
	if action == "" {
		action = queue.RetireDelete
	}
	if r.Params.OnBatch != nil {
		r.Params.OnBatch(true)
		defer r.Params.OnBatch(false)
	}
	done, err := r.Store.RetireTasks(ctx, tasks, action)
	var reports int64
	if err == nil && ret.Reports == queue.ReportsDelete {
		ids := make([]bson.ObjectID, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		reports, err = r.Store.DeleteReports(ctx, ids)
	}
	r.Log.Info("retention removed ended tasks", zap.String("queue", metrics.Label(q.Name)), zap.String("class", class),
		zap.String("action", string(action)), zap.Duration("kept_for", ret.Keep[class]), zap.Int64("tasks", done.Tasks),
		zap.Int64("files", done.Files), zap.Int64("reports", reports), zap.Int("protected", read-len(tasks)))
	return more, err
}

// release gives the lease up if this node holds it: at stop, and when no
// queue has a retention any more.
func (r *Retention) release(ctx context.Context, now time.Time) error {
	if r.until.IsZero() {
		return nil
	}
	r.until, r.after = time.Time{}, nil
	if err := r.Store.ReleaseLease(ctx, retentionLease, r.Params.Name, now); err != nil {
		return err
	}
	r.Log.Info("this node released the retention lease")
	return nil
}

// stop releases the lease as the node stops, so that another node may
// take it at once rather than when it runs out.
func (r *Retention) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.release(ctx, r.Now()); err != nil {
		r.Log.Warn("could not release the retention lease at stop; another node takes it when it runs out", zap.Error(err))
	}
}
