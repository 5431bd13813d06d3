package den

import (
	"context"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// sweep cancels the queued tasks whose cancel is set (-5: the claim never
// takes them), fails the malformed tasks of the served queues, notes on
// queued tasks that request more than any node offers why they wait, and
// rewrites start_after and cancel values of other types (epoch seconds,
// date strings, 1, "yes") as the ISODate or boolean the claim and
// cancellation queries match, failing the queued tasks whose value means
// nothing.
func (n *Node) sweep(ctx context.Context, queues []queue.Queue, now time.Time) error {
	if c, err := n.store.CancelQueued(ctx, now); err != nil {
		return err
	} else if c > 0 {
		n.metrics.Cancellations.WithLabelValues("queued").Add(float64(c))
		n.log.Info("cancelled queued tasks", zap.Int64("count", c))
	}
	unfit := n.unfitQuery(ctx, queues)
	tasks, err := n.store.Irregular(ctx, queueIDs(queues), unfit)
	if err != nil {
		return err
	}
	if err := n.normalize(ctx, tasks, now); err != nil {
		return err
	}
	malformed, err := n.store.Malformed(ctx, queueIDs(queues))
	if err != nil {
		return err
	}
	failed := map[bson.ObjectID]int{}
	for _, m := range malformed {
		if !n.chore() {
			break
		}
		ok, err := n.store.FailMalformed(ctx, m, n.cfg.Name, now)
		if err != nil {
			return err
		}
		if ok {
			failed[m.Queue]++
			n.metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			if err := n.store.DecrementTodo(ctx, m.Queue); err != nil {
				return err
			}
		}
	}
	for _, q := range queues {
		if c := failed[q.ID]; c > 0 {
			n.log.Warn("failed malformed tasks (reason in their stderr)", queueField(q.Name), zap.Int("count", c))
		}
	}
	// A note is for people to read: failing to write one must not keep
	// the dependencies below from moving on.
	if err := n.noteUnfit(ctx, queues, unfit, tasks); err != nil {
		if n.notes.set("unfit-notes", err.Error()) {
			n.log.Warn("cannot write why tasks wait (unfit); trying again each sweep", zap.Error(err))
		}
	} else if n.notes.clear("unfit-notes") {
		n.log.Info("writing why tasks wait (unfit) again")
	}
	return n.sweepDependencies(ctx, queueIDs(queues), now)
}

// normalize handles the tasks of the served queues (of those the sweep's
// query returned) whose start_after, cancel or request the claim and
// cancel queries cannot match as they are.
func (n *Node) normalize(ctx context.Context, tasks []queue.Task, now time.Time) error {
	fixed := 0
	for _, t := range tasks {
		if !t.IsIrregular() {
			continue // there for the unfit step
		}
		if !n.chore() {
			break
		}
		bad := t.Malformed()
		if len(bad) == 0 {
			ok, err := n.store.Normalize(ctx, t)
			if err != nil {
				return err
			}
			if ok {
				fixed++
			}
			continue
		}
		reason := strings.Join(bad, "; ")
		if t.Status != queue.StatusQueued {
			if n.notes.set("irregular:"+t.ID.Hex(), reason) {
				n.log.Warn("a claimed or running task has a field den cannot read; leaving it as it is", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			}
			continue
		}
		ok, err := n.store.FailQueued(ctx, t, n.cfg.Name, reason, now)
		if err != nil {
			return err
		}
		if ok {
			n.metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			n.log.Warn("failed a task that cannot be run as written (reason in its stderr)", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			if err := n.store.DecrementTodo(ctx, t.Queue); err != nil {
				return err
			}
		}
	}
	if fixed > 0 {
		n.log.Info("rewrote start_after, cancel or requested_resources values as the ISODate, boolean or number they mean", zap.Int("tasks", fixed))
	}
	return nil
}
