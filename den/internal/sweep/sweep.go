package sweep

import (
	"context"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/queue"
)

// Params is what the sweeper reads of the configuration.
type Params struct {
	Name          string
	SweepEvery    time.Duration
	DeadNodeAfter time.Duration
}

// offerer tells what this node offers one task's request now, as its
// node document says (the heartbeat).
type Offerer interface {
	Offer(ctx context.Context) queue.Resources
}

// waker makes the claimer claim at once.
type Waker interface {
	WakeUp()
}

// sweeper carries out what tasks' own fields ask of the node, apart from
// claims: every pass, the cancel flags of the tasks this node holds
// (cancel); every SweepEvery, the sweep: queued tasks whose cancel is
// set, unique keys of ended tasks (queue.NodeStore.FreeEnded), malformed tasks,
// values rewritten as the queries match them, notes
// on tasks no node can run (noteUnfit), and dependencies between tasks
// (sweepDependencies). Its writes count against the pass's budget of housekeeping
// writes.
type Sweeper struct {
	*base.Env
	Params Params
	Chores *chore.Budget
	// pool stops the runs of cancelled tasks.
	Pool *runners.Pool
	// self tells what this node offers one task's request now (the
	// heartbeat); claims is woken to claim at once (dependencies
	// released: the claimer).
	Self   Offerer
	Claims Waker
	// offers are the offers of the nodes alive at the last dead-node
	// check (every RescueEvery), by node name, for unfit notes. Only the
	// loop's goroutine uses it.
	offers map[string]queue.Resources
	// last is when the sweep last ran to the end; pace keeps it to its
	// share of the database's time.
	last time.Time
	pace chore.Pace
}

// due reports whether the sweep is due in a pass at now.
func (sw *Sweeper) Due(now time.Time) bool {
	return now.Sub(sw.last) >= sw.Params.SweepEvery && sw.pace.Ready()
}

// sweep cancels the queued tasks whose cancel is set (-5: the claim never
// takes them), fails the malformed tasks of the served queues, notes on
// queued tasks that request more than any node offers why they wait, and
// rewrites start_after and cancel values of other types (epoch seconds,
// date strings, 1, "yes") as the ISODate or boolean the claim and
// cancellation queries match, failing the queued tasks whose value means
// nothing.
func (sw *Sweeper) Sweep(ctx context.Context, queues []queue.Queue, now time.Time) error {
	began := time.Now()
	defer sw.pace.Ran(began)
	unfit := sw.unfitQuery(ctx, queues)
	tasks, err := sw.Store.Irregular(ctx, queue.IDs(queues), unfit)
	if err != nil {
		return err
	}
	if err := sw.normalize(ctx, tasks, now); err != nil {
		return err
	}
	// After normalize, so that a cancel it has just rewritten (1, "yes")
	// is acted on in this sweep, not the next, which pace may put minutes
	// away on a slow server.
	if c, err := sw.Store.CancelQueued(ctx, now); err != nil {
		return err
	} else if c > 0 {
		sw.Metrics.Cancellations.WithLabelValues("queued").Add(float64(c))
		sw.Log.Info("cancelled queued tasks", zap.Int64("count", c))
	}
	// After the cancels, so that the keys of the tasks just cancelled are
	// free in this sweep: the unique keys of every task that ended
	// without a den node's result (a Perl node's, a cancel, a rescue).
	if _, err := sw.Store.FreeEnded(ctx, bson.ObjectID{}, "", now); err != nil {
		return err
	}
	malformed, err := sw.Store.Malformed(ctx, queue.IDs(queues))
	if err != nil {
		return err
	}
	failed := map[bson.ObjectID]int{}
	for _, m := range malformed {
		if !sw.Chores.Take() {
			break
		}
		ok, err := sw.Store.FailMalformed(ctx, m, sw.Params.Name, now)
		if err != nil {
			return err
		}
		if ok {
			failed[m.Queue]++
			sw.Metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			if err := sw.Store.DecrementTodo(ctx, m.Queue); err != nil {
				return err
			}
		}
	}
	for _, q := range queues {
		if c := failed[q.ID]; c > 0 {
			sw.Log.Warn("failed malformed tasks (reason in their stderr)", base.QueueField(q.Name), zap.Int("count", c))
		}
	}
	// A note is for people to read: failing to write one must not keep
	// the dependencies below from moving on.
	if err := sw.noteUnfit(ctx, queues, unfit, tasks); err != nil {
		if sw.Notes.Set("unfit-notes", err.Error()) {
			sw.Log.Warn("cannot write why tasks wait (unfit); trying again each sweep", zap.Error(err))
		}
	} else if sw.Notes.Clear("unfit-notes") {
		sw.Log.Info("writing why tasks wait (unfit) again")
	}
	if err := sw.sweepDependencies(ctx, queue.IDs(queues), now); err != nil {
		return err
	}
	if !sw.Chores.Spent() {
		sw.last = now // else the rest next pass, after its claims
	}
	return nil
}

// normalize handles the tasks of the served queues (of those the sweep's
// query returned) whose start_after, cancel or request the claim and
// cancel queries cannot match as they are.
func (sw *Sweeper) normalize(ctx context.Context, tasks []queue.Task, now time.Time) error {
	fixed := 0
	for _, t := range tasks {
		if !t.IsIrregular() {
			continue // there for the unfit step
		}
		if !sw.Chores.Take() {
			break
		}
		problems := t.Malformed()
		if len(problems) == 0 {
			ok, err := sw.Store.Normalize(ctx, t)
			if err != nil {
				return err
			}
			if ok {
				fixed++
			}
			continue
		}
		reason := strings.Join(problems, "; ")
		if t.Status != queue.StatusQueued {
			if sw.Notes.Set("malformed-task:"+t.ID.Hex(), reason) {
				sw.Log.Warn("a claimed or running task has a field den cannot read; leaving it as it is", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			}
			continue
		}
		ok, err := sw.Store.FailQueued(ctx, t, sw.Params.Name, reason, now)
		if err != nil {
			return err
		}
		if ok {
			sw.Metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			sw.Log.Warn("failed a task that cannot be run as written (reason in its stderr)", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			if err := sw.Store.DecrementTodo(ctx, t.Queue); err != nil {
				return err
			}
		}
	}
	if fixed > 0 {
		sw.Log.Info("rewrote start_after, cancel, requested_resources or priority values as the ISODate, boolean or number they mean", zap.Int("tasks", fixed))
	}
	return nil
}
