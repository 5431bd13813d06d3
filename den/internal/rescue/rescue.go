package rescue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/den/internal/mongoclient"
	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/queue"
)

// Params is what the rescuer reads of the configuration.
type Params struct {
	Name          string
	DeadNodeAfter time.Duration
	OrphanAge     time.Duration
	RescueEvery   time.Duration
}

// rescuer rescues tasks whose runner or node died, and claims no runner
// took up: a retry when retries are left, else orphaned (-6), as the
// protocol's reaping does. None of it acts on a task that a live runner
// still runs. It runs every RescueEvery (and once at start), within the
// pass's budget of housekeeping writes, and for one task whenever a
// runner of this process dies running it.
type Rescuer struct {
	*base.Env
	Params Params
	Chores *chore.Budget
	// pool tells whose a recorded runner is and stops what a dead run
	// left; held is what this node holds (the claimer's).
	Pool *runners.Pool
	Held *held.Tasks
	// last is when the rescues last ran to the end, and next the soonest
	// time a task they left alone may need them: when a node that holds
	// tasks will have been silent for dead_node_after, or a runner that
	// was still at work will have been for as long as its lease holds.
	// They run again then, not up to RescueEvery later.
	last, next time.Time
	// queued hears of the tasks a rescue put back in their queue, for
	// this node's claims to take them at once.
	Queued WorkNotice
	// nextHolder is where the next rescue of dead nodes starts among the
	// node names that hold tasks: one that ran out of its budget or time
	// goes on from where it stopped, instead of starting over with the
	// same nodes every round.
	nextHolder int
}

// workNotice hears of a task put back in its queue (the claimer): no
// count tells of it.
type WorkNotice interface{ WorkIn(queueID bson.ObjectID) }

// due reports whether the rescues are due in a pass at now: every
// RescueEvery, and as soon as a task they left alone may need them.
func (rc *Rescuer) Due(now time.Time) bool {
	return now.Sub(rc.last) >= rc.Params.RescueEvery || (!rc.next.IsZero() && !now.Before(rc.next))
}

// soonest notes a time a task the rescues left alone may need them.
func (rc *Rescuer) soonest(at time.Time) {
	if rc.next.IsZero() || at.Before(rc.next) {
		rc.next = at
	}
}

// NodesSeen are the node documents' last beats and offers, as the rescue
// of dead nodes read them at at. The rescuer returns them, and the
// housekeeping hands them to the sweeper, which notes unfit tasks by them.
type NodesSeen struct {
	Beats  map[string]time.Time
	Offers map[string]queue.Resources
	At     time.Time
}

// run rescues this node's stale claims and the tasks of dead runners and
// dead nodes: held is what this node holds as the pass read it, queues
// the queues it read. What the pass's budget leaves undone waits for the
// next pass. It returns the node documents it read (at zero when it
// did not get that far), with an error or not.
func (rc *Rescuer) Run(ctx context.Context, held []queue.Task, queues queue.ByID, now time.Time) (NodesSeen, error) {
	if err := rc.staleClaims(ctx, held, queues, now); err != nil {
		return NodesSeen{}, err
	}
	if err := rc.deadRunners(ctx, held, queues); err != nil {
		return NodesSeen{}, err
	}
	rc.next = time.Time{}
	seen := NodesSeen{At: rc.Now()}
	var err error
	if seen.Beats, seen.Offers, err = rc.Store.NodesSeenOffers(ctx); err != nil {
		return NodesSeen{}, err
	}
	if err := rc.deadNodes(ctx, queues, seen); err != nil {
		return seen, err
	}
	if !rc.Chores.Spent() {
		rc.last = now // else the rest next pass, after its claims
	}
	return seen, nil
}

// deadRunners rescues this node's running tasks whose runner process
// is gone, for example after the node itself was restarted. Live runners
// are left alone. A runner recorded on another host under this node's name
// (the node moved, as a container does) counts as gone once it has not
// beaten for dead_node_after. A task this node's name holds at 0 with no
// runner recorded was not started by a den runner (a writer set it by
// hand, or a node of another kind shares the name); it is rescued once
// its mtime is dead_node_after old, so that it cannot hold its queue's
// slot for ever.
func (rc *Rescuer) deadRunners(ctx context.Context, held []queue.Task, queues queue.ByID) error {
	now := rc.Now()
	for _, task := range held {
		if task.Status != queue.StatusRunning {
			continue
		}
		var reason string
		switch r := task.Runner; {
		case r == nil:
			if !task.Mtime.IsZero() && now.Sub(task.Mtime) <= rc.Params.DeadNodeAfter {
				continue
			}
			reason = fmt.Sprintf("running (0) under node %s with no runner recorded for %s", rc.Params.Name, rc.Params.DeadNodeAfter)
		case rc.Pool.OnThisHost(*r) && !rc.Pool.StartedHere(r.PID) && !runners.Alive(*r):
			reason = fmt.Sprintf("task runner (pid %d) is gone", r.PID)
		case rc.Pool.OnThisHost(*r) && !rc.Pool.RunGoing(task.ID, *r) && !rc.Held.Finished(task.ID):
			reason = fmt.Sprintf("task runner (pid %d) is alive but no longer runs the task", r.PID)
		case !rc.Pool.OnThisHost(*r) && runners.StaleSign(*r, now, rc.Pool.HeldFor(task, queues.Of(task), *r)):
			reason = fmt.Sprintf("task runner on host %s has not beaten since %s", r.Host, r.LastSign().Format(time.RFC3339))
		default:
			continue // its runner is at work
		}
		if !rc.Chores.Take() {
			return nil
		}
		if _, err := rc.rescueWith(ctx, task, queues.Of(task), rescueDeadRunner, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: reason}); rc.stopRescues(ctx, task, err) {
			return err
		}
	}
	return nil
}

// staleClaims rescues this node's claims (among those it holds) that no runner
// took up within orphan_age: a retry when retries are left, else orphaned
// (-6).
func (rc *Rescuer) staleClaims(ctx context.Context, held []queue.Task, queues queue.ByID, now time.Time) error {
	for _, task := range queue.StaleClaims(held, now.Add(-rc.Params.OrphanAge)) {
		if !rc.Chores.Take() {
			return nil
		}
		if _, err := rc.rescueWith(ctx, task, queues.Of(task), rescueStaleClaim, queue.Outcome{Kind: queue.OutcomeNodeDied, Reason: fmt.Sprintf("claimed by node %s but never started by a runner within orphan_age (%s)", rc.Params.Name, rc.Params.OrphanAge)}); rc.stopRescues(ctx, task, err) {
			return err
		}
	}
	return nil
}

// deadNodes rescues the claimed and running tasks of nodes that have
// not written their node document for DeadNodeAfter, and of node names
// that have no node document at all (a writer's typo, a node of another
// kind, a document deleted by hand) once the task's mtime is that old. A
// stopped node's runners keep working (KillMode=process), so a running task
// is rescued only when its runner has not beaten for DeadNodeAfter either.
// Several live nodes may do this at once: each task's rescue is
// conditional, so it happens once.
func (rc *Rescuer) deadNodes(ctx context.Context, queues queue.ByID, nodes NodesSeen) error {
	now, seen := nodes.At, nodes.Beats
	holders, err := rc.Store.ClaimingNodes(ctx)
	if err != nil {
		return err
	}
	start := 0
	if len(holders) > 0 {
		start = rc.nextHolder % len(holders)
	}
	for k := range holders {
		i := (start + k) % len(holders)
		holder := holders[i]
		rc.nextHolder = i // where the next round starts if this one stops here
		name, isName := holder.StringValueOK()
		if isName && name == rc.Params.Name {
			continue
		}
		last, known := seen[name]
		if isName && known && now.Sub(last) <= rc.Params.DeadNodeAfter {
			// Alive: dead once silent for dead_node_after (a little after,
			// for the time in milliseconds the beat is stored in).
			rc.soonest(last.Add(rc.Params.DeadNodeAfter + time.Millisecond))
			continue
		}
		label := name
		if !isName {
			label = holder.String()
		}
		why := fmt.Sprintf("node %s stopped updating its node document (dead for %s)", label, rc.Params.DeadNodeAfter)
		if !isName || !known {
			why = fmt.Sprintf("claimed under node %s, which has no node document", label)
		}
		tasks, err := rc.Store.NodeTasks(ctx, holder)
		if err != nil {
			return err
		}
		counts := map[int]int{}
		var rescueErr error
		for _, task := range tasks {
			if r := task.Runner; r != nil {
				if heldFor := rc.Pool.HeldFor(task, queues.Of(task), *r); !runners.StaleSign(*r, now, heldFor) {
					rc.soonest(r.LastSign().Add(heldFor + time.Millisecond))
					continue // its runner is still at work, or may still be stopping it
				}
			}
			if (!isName || !known) && !task.Mtime.IsZero() && now.Sub(task.Mtime) <= rc.Params.DeadNodeAfter {
				rc.soonest(task.Mtime.Add(rc.Params.DeadNodeAfter + time.Millisecond))
				continue // give a node that has just started time to write its document
			}
			if !rc.Chores.Take() {
				break
			}
			st, err := rc.rescueWith(ctx, task, queues.Of(task), rescueDeadNode, queue.Outcome{Kind: queue.OutcomeNodeDied, Reason: why})
			if rc.stopRescues(ctx, task, err) {
				rescueErr = err
				break
			}
			counts[st]++
		}
		if done := counts[queue.StatusOrphaned] + counts[queue.StatusQueued] + counts[queue.StatusCancelled]; done > 0 {
			rc.Log.Warn("rescued the tasks of a dead or unknown node", zap.String("dead_node", label), zap.String("why", why),
				zap.Int("orphaned", counts[queue.StatusOrphaned]), zap.Int("retried", counts[queue.StatusQueued]), zap.Int("cancelled", counts[queue.StatusCancelled]))
		}
		if rescueErr != nil {
			return rescueErr
		}
		if rc.Chores.Spent() {
			return nil // the rest next round
		}
	}
	rc.nextHolder = 0
	return nil
}

// Why a task was rescued, for den_rescues_total.
const (
	rescueDeadRunner = "dead_runner"
	rescueDeadNode   = "dead_node"
	rescueStaleClaim = "stale_claim"
)

// rescue rescues one task whose runner died, reading its queue's settings.
func (rc *Rescuer) Rescue(ctx context.Context, task queue.Task, why queue.Outcome) int {
	q, err := rc.Store.QueueDoc(ctx, task.Queue)
	if err != nil {
		rc.Log.Warn("could not read a task's queue to rescue it; the periodic check will", zap.Error(err))
		return 0
	}
	st, err := rc.rescueWith(ctx, task, q, rescueDeadRunner, why)
	if err != nil && ctx.Err() == nil {
		rc.Log.Warn("could not rescue a task; the periodic check will", zap.String("task_id", task.ID.Hex()), zap.Error(err))
	}
	return st
}

// stopRescues reports whether the periodic rescues stop at err, the
// outcome of one task's rescue: they stop when the node stops or the
// database cannot be reached (the pass reports that once, and the next
// one goes on). A write the server refused for this task alone (a
// document at the size limit cannot take its history) is warned about
// once, and the rescues go on with the other tasks: one bad document
// does not hold up the rest.
func (rc *Rescuer) stopRescues(ctx context.Context, task queue.Task, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil || mongoclient.Unreachable(err) {
		return true
	}
	if rc.Notes.Set("rescue:"+task.ID.Hex(), err.Error()) {
		rc.Log.Warn("could not rescue a task; the server refused its write (tried again every rescue, logged once)", zap.String("task_id", task.ID.Hex()), zap.Error(err))
	}
	return false
}

// rescueWith rescues one task with its queue's settings (q may be nil)
// and returns the task's new status, or 0 when someone else got there
// first. A write that fails is returned, not logged: the periodic rescues
// stop there and the pass reports the database's failure once (a node
// that stops, or a database that is down, is not one warning per task).
//
// A run on this host is stopped first (pool.endDeadRun): a runner that
// is alive but hung is killed with its group, then whatever the run left
// is stopped, so that a retry never overlaps it. The count goes into
// the task's history (leftover_processes).
func (rc *Rescuer) rescueWith(ctx context.Context, task queue.Task, q *queue.Queue, kind string, why queue.Outcome) (int, error) {
	reason := why.Reason
	id := task.ID
	leftovers, busy := rc.Pool.EndDeadRun(ctx, task, q)
	if busy {
		return 0, nil // another pass is stopping this run, and rescues it after
	}
	st, err := rc.Store.Rescue(ctx, task, q, why, leftovers, rc.Now())
	if err != nil {
		return 0, fmt.Errorf("rescue task %s: %w", id.Hex(), err)
	}
	rc.Notes.Clear("rescue:" + id.Hex())
	if st != 0 {
		rc.Metrics.Rescues.WithLabelValues(kind).Inc()
	}
	switch {
	case st == queue.StatusOrphaned:
		rc.Log.Warn("task orphaned", zap.String("task_id", id.Hex()), zap.String("reason", reason))
	case st == queue.StatusQueued:
		rc.Log.Warn("task put back for a retry", zap.String("task_id", id.Hex()), zap.String("reason", reason))
		if rc.Queued != nil {
			rc.Queued.WorkIn(task.Queue)
		}
	case st == queue.StatusCancelled:
		rc.Log.Info("cancelled task's runner is gone; recorded -5", zap.String("task_id", id.Hex()))
	}
	return st, nil
}
