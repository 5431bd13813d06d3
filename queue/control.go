package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Task control fields: den's own, optional, ignored by Disbatch 4 nodes.
// With none of them set, a task behaves exactly as Disbatch 4 defines.
const (
	// FieldCancel: a user sets cancel: true to cancel a task. Queued, it
	// never starts (-5); running, its runner is stopped (-5).
	FieldCancel = "cancel"
	// FieldTimeout: seconds a run may take (task, else queue); then it is
	// stopped and fails with timed_out: true.
	FieldTimeout = "timeout"
	// FieldMaxRetries: how many times a failed run is retried (task, else
	// queue; default 0).
	FieldMaxRetries = "max_retries"
	// FieldRetryDelay: seconds before the first retry (task, else queue;
	// default 10), doubling per attempt with jitter, at most an hour.
	FieldRetryDelay = "retry_delay"
	// FieldMaxTermination: seconds between SIGTERM and SIGKILL when a run
	// is stopped (task, else queue, else the node's default).
	FieldMaxTermination = "max_termination_time"
	// FieldMaxOutput: the most bytes a run may write to each of stdout
	// and stderr (task, else queue); it can lower the node's max_output,
	// never raise it. Past it the run is stopped and fails.
	FieldMaxOutput = "max_output"
	// FieldMaxProcesses: the most processes, threads included, a run's
	// programs may have at once (task, else queue); it can lower the
	// node's runner.max_processes, never raise it. Past it fork fails.
	FieldMaxProcesses = "max_processes"
	// FieldStartAfter: a time before which the task is not claimed (an
	// ISODate; epoch seconds and date strings are turned into one by the
	// sweep, see NormalizeTasks).
	FieldStartAfter = "start_after"
	// FieldEndBefore: a time by which the task must have finished (task
	// only). A run that has not started by then never starts,
	// one still running then is stopped; either way the task fails (2)
	// with expired: true and is not retried.
	FieldEndBefore = "end_before"
	FieldExpired   = "expired"
	// FieldMaxTimeouts: how many timed-out runs are retried, counted apart
	// from other failures (task, else queue). Unset, a timeout is
	// a failure like any other and counts against max_retries.
	FieldMaxTimeouts = "max_timeouts"
	// FieldTimeouts counts the runs that timed out and were retried.
	FieldTimeouts = "timeouts"
	// FieldAttempts counts the runs that were retried; FieldHistory lists
	// them, one HistoryEntry each.
	FieldAttempts = "attempts"
	FieldHistory  = "history"
)

// Options are a task's control settings, from the task, else its queue.
type Options struct {
	Timeout        time.Duration // 0: none
	MaxRetries     int
	RetryDelay     time.Duration
	MaxTermination time.Duration // 0: the node's default
	MaxOutput      int64         // bytes per stream; 0: the node's max_output
	MaxProcesses   int           // processes and threads; 0: the node's runner.max_processes
	Requested      Resources     // requested_resources; zero: none
	Attempts       int
	// MaxTimeouts is nil when timeouts count as failures (max_retries);
	// Timeouts counts the timed-out runs retried so far.
	MaxTimeouts *int
	Timeouts    int
	// UsageInterval is how often a running task's usage is written; 0:
	// only at its end.
	UsageInterval time.Duration
	// EndBefore is the task's deadline; zero: none.
	EndBefore time.Time
	// MemoryRetryFactor multiplies the memory request of a run stopped
	// for passing it (resourceretry.go).
	MemoryRetryFactor float64
}

// CanRetry reports whether a run that ended badly (timedOut: by its
// timeout) may be retried. With max_timeouts set, timed-out runs are
// counted against it and other failures against max_retries, apart
// (attempts minus timeouts); without, every retried run counts against
// max_retries.
func (o Options) CanRetry(timedOut bool) bool {
	if o.MaxTimeouts == nil {
		return o.Attempts < o.MaxRetries
	}
	if timedOut {
		return o.Timeouts < *o.MaxTimeouts
	}
	return o.Attempts-o.Timeouts < o.MaxRetries
}

// Options returns the control settings of task t: its own, else its
// queue's (q may be nil), else the defaults.
func (t Task) Options(q *Queue) Options {
	var qc Control
	if q != nil {
		qc = q.Control
	}
	o := Options{RetryDelay: 10 * time.Second, Attempts: t.Attempts, Timeouts: t.Timeouts, EndBefore: t.EndBefore,
		MaxTimeouts: pick(t.Control.MaxTimeouts, qc.MaxTimeouts)}
	o.UsageInterval = DefaultUsageInterval
	if d := pick(t.Control.UsageInterval, qc.UsageInterval); d != nil {
		o.UsageInterval = *d
	}
	if d := pick(t.Control.Timeout, qc.Timeout); d != nil {
		o.Timeout = *d
	}
	if n := pick(t.Control.MaxRetries, qc.MaxRetries); n != nil {
		o.MaxRetries = *n
	}
	if d := pick(t.Control.RetryDelay, qc.RetryDelay); d != nil {
		o.RetryDelay = *d
	}
	if r := pick(t.Control.Requested, qc.Requested); r != nil {
		o.Requested = *r
	}
	o.MemoryRetryFactor = DefaultMemoryRetryFactor
	if f := pick(t.Control.MemoryRetryFactor, qc.MemoryRetryFactor); f != nil {
		o.MemoryRetryFactor = *f
	}
	if d := pick(t.Control.MaxTermination, qc.MaxTermination); d != nil {
		o.MaxTermination = *d
	}
	if n := pick(t.Control.MaxOutput, qc.MaxOutput); n != nil && *n > 0 {
		o.MaxOutput = *n
	}
	if n := pick(t.Control.MaxProcesses, qc.MaxProcesses); n != nil && *n > 0 {
		o.MaxProcesses = int(*n)
	}
	return o
}

// pick returns the task's setting, else the queue's.
func pick[T any](task, queue *T) *T {
	if task != nil {
		return task
	}
	return queue
}

// RetryAt is when attempt number attempt (1 for the first retry) may start:
// delay doubled per earlier retry, jittered by ±20%, at most an hour.
func (o Options) RetryAt(now time.Time, attempt int) time.Time {
	d := float64(o.RetryDelay) * math.Pow(2, float64(max(attempt-1, 0)))
	d = min(d, float64(time.Hour)) * (0.8 + 0.4*rand.Float64())
	return now.Add(time.Duration(d))
}

// HistoryEntry records one run that was retried (or rescued).
type HistoryEntry struct {
	Attempt  int    `bson:"attempt"`
	Node     string `bson:"node"`
	Status   int    `bson:"status"`
	ExitCode *int   `bson:"exit_code,omitempty"`
	Signal   string `bson:"signal,omitempty"`
	TimedOut bool   `bson:"timed_out"`
	// Outcome is who decided how the run ended (see Outcome); Reason why.
	Outcome string `bson:"outcome,omitempty"`
	Reason  string `bson:"reason,omitempty"`
	// Leftovers counts the processes of the run that den stopped after it
	// ended or its runner died.
	Leftovers int       `bson:"leftover_processes,omitempty"`
	Started   time.Time `bson:"started,omitempty"`
	Ended     time.Time `bson:"ended"`
	Stdout    any       `bson:"stdout"`
	Stderr    any       `bson:"stderr"`
	// Usage is what the run used (see Usage); nil when unknown (a run
	// whose runner died before it wrote any).
	Usage *Usage `bson:"usage,omitempty"`
	// Requested is what the run's task requested (requested_resources);
	// nil: nothing.
	Requested *Resources `bson:"requested_resources,omitempty"`
	// RetriedBy is RetriedByOperator when an operator put the task back
	// after this run ended; empty for den's own retries.
	RetriedBy string `bson:"retried_by,omitempty"`
	// NextRequested, when set, becomes the task's requested_resources for
	// its next attempt (a resource retry). It is not stored in the entry.
	NextRequested *Resources `bson:"-"`
}

// requeue is the update that puts a task back in its queue for another
// attempt, with the run recorded in its history.
func requeue(entry HistoryEntry, startAfter, now time.Time) bson.D {
	inc := bson.D{{Key: FieldAttempts, Value: 1}}
	if entry.TimedOut {
		inc = append(inc, bson.E{Key: FieldTimeouts, Value: 1})
	}
	set := bson.D{
		{Key: "status", Value: StatusQueued},
		{Key: "node", Value: Unclaimed},
		{Key: FieldStartAfter, Value: startAfter},
		{Key: "mtime", Value: now},
	}
	if entry.Usage != nil {
		// The task's usage is its last run's until the next one starts.
		set = append(set, bson.E{Key: FieldUsage, Value: entry.Usage})
	}
	if entry.NextRequested != nil {
		set = append(set, bson.E{Key: FieldRequested, Value: entry.NextRequested})
	}
	return bson.D{
		{Key: "$set", Value: set},
		{Key: "$unset", Value: bson.D{{Key: "runner", Value: ""}, unsetLive}},
		{Key: "$inc", Value: inc},
		{Key: "$push", Value: bson.D{{Key: FieldHistory, Value: entry}}},
	}
}

// Retry puts a task this run failed back in its queue, to start no earlier
// than startAfter. It reports false, and writes nothing, when the task is
// no longer this run's.
func (s *Store) Retry(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, entry HistoryEntry, startAfter, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx, running(taskID, node, token), requeue(entry, startAfter, now))
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// Rescue handles a claimed or running task whose runner or node is dead:
// it goes back to its queue when it has retries left, else it is orphaned
// (-6); a cancelled one is cancelled (-5). leftovers is how many processes
// of the dead run the caller stopped first; it is recorded in the history
// entry, or in the task. The update is conditional on the task being in
// exactly the state read (same node, status, run and mtime), so that when
// several live nodes rescue at once, one of them does it and the others
// change nothing. q is the task's queue (nil: unknown). It returns the
// status the task now has, or 0 when someone else got there first.
func (s *Store) Rescue(ctx context.Context, task Task, q *Queue, why Outcome, leftovers int, now time.Time) (int, error) {
	reason := why.Reason
	if !task.StatusOK {
		return 0, fmt.Errorf("rescue task %s: its status is not a number", task.ID.Hex())
	}
	if task.Status != StatusClaimed && task.Status != StatusRunning {
		return 0, nil // it has an outcome already: nothing to rescue
	}
	filter := bson.D{{Key: "_id", Value: task.ID}, {Key: "node", Value: task.nodeRaw}, {Key: "status", Value: task.Status}}
	if task.Runner != nil {
		filter = append(filter, bson.E{Key: "runner.token", Value: task.Runner.Token})
	} else {
		filter = append(filter, bson.E{Key: "runner", Value: nil})
	}
	if task.mtimeRaw.Type != 0 {
		filter = append(filter, bson.E{Key: "mtime", Value: task.mtimeRaw})
	}
	opts := task.Options(q)
	var update bson.D
	newStatus := StatusOrphaned
	if task.Cancel {
		// Cancelled, and its runner is gone: it is cancelled, not orphaned
		// or retried.
		set := append(bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now}},
			Outcome{OutcomeCancelled, "cancelled, and its runner is gone (" + reason + ")"}.set()...)
		update = bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{unsetLive}}}
		newStatus = StatusCancelled
	} else if opts.CanRetry(false) {
		entry := HistoryEntry{Attempt: opts.Attempts + 1, Node: task.Node, Status: StatusOrphaned, Outcome: why.Kind, Reason: reason, Ended: now, Leftovers: leftovers}
		if opts.Requested != (Resources{}) {
			entry.Requested = &opts.Requested
		}
		if task.Runner != nil {
			entry.Started = task.Runner.RunStart()
		}
		if u, ok := UsageOf(task.Raw); ok && u.Running {
			// The last update its run wrote (usage_interval): the best
			// there is of a run whose runner died.
			entry.Usage = &u
		}
		update = requeue(entry, opts.RetryAt(now, opts.Attempts+1), now)
		newStatus = StatusQueued
	} else {
		set := append(bson.D{{Key: "status", Value: StatusOrphaned}, {Key: "mtime", Value: now}, {Key: "orphan_reason", Value: reason}}, why.set()...)
		if leftovers > 0 {
			set = append(set, bson.E{Key: "leftover_processes", Value: leftovers})
		}
		update = bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{unsetLive}}}
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if err != nil {
		return 0, fmt.Errorf("rescue task %s: %w", task.ID.Hex(), err)
	}
	if res.MatchedCount == 0 {
		return 0, nil
	}
	return newStatus, nil
}

// CancelQueued cancels (-5) every queued task whose cancel field is true,
// and returns how many. Any node may do it: the update is conditional on
// the task still being queued.
func (s *Store) CancelQueued(ctx context.Context, now time.Time) (int64, error) {
	filter := bson.D{{Key: FieldCancel, Value: true}, {Key: "status", Value: StatusQueued}}
	if some, err := anyTask(ctx, s.tasks, filter); err != nil || !some {
		if err != nil {
			return 0, fmt.Errorf("cancel queued tasks: %w", err)
		}
		return 0, nil
	}
	res, err := s.tasks.UpdateMany(ctx, filter,
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: cancelled before it started\n"},
			{Key: FieldOutcome, Value: OutcomeCancelled}, {Key: FieldOutcomeReason, Value: "cancelled before it started"},
		}}})
	if err != nil {
		return 0, fmt.Errorf("cancel queued tasks: %w", err)
	}
	return res.ModifiedCount, nil
}

// Held returns the tasks node holds: its claimed and running tasks, optionally only
// those with cancel set.
func (s *Store) Held(ctx context.Context, node string, cancelled bool) ([]Task, error) {
	conds, err := s.statusConditions(ctx, StatusClaimed, StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("find tasks: %w", err)
	}
	var out []Task
	for _, st := range conds {
		filter := bson.D{{Key: "node", Value: bson.D{{Key: "$eq", Value: node}}}, {Key: "status", Value: st}}
		if cancelled {
			filter = append(filter, bson.E{Key: FieldCancel, Value: true})
		}
		tasks, err := s.findTasks(ctx, filter)
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	return out, nil
}

// NodeTasksLimit is the most tasks NodeTasks returns: a rescue takes the
// rest on its next round.
const NodeTasksLimit = 1000

// NodeTasks returns the claimed and running tasks of a node (its name as
// stored, which need not be a string), at most NodeTasksLimit of them. The
// name is matched with $eq: a name that is a regular expression matches
// only itself, not every node's tasks.
func (s *Store) NodeTasks(ctx context.Context, node any) ([]Task, error) {
	conds, err := s.statusConditions(ctx, StatusClaimed, StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("find tasks: %w", err)
	}
	var out []Task
	for _, st := range conds {
		if len(out) >= NodeTasksLimit {
			break
		}
		tasks, err := s.collect(ctx, "find tasks", bson.D{{Key: "node", Value: bson.D{{Key: "$eq", Value: node}}}, {Key: "status", Value: st}},
			options.Find().SetProjection(stateFields).SetBatchSize(oneReply).SetLimit(int64(NodeTasksLimit-len(out))))
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	return out, nil
}

// stateFields are the fields of a task a pass needs: everything but the
// parameters and the output, which may be large (a task document can be
// up to 16 MiB).
var stateFields = bson.D{{Key: "parameters", Value: 0}, {Key: "params", Value: 0}, {Key: "stdout", Value: 0}, {Key: "stderr", Value: 0}, {Key: FieldHistory, Value: 0}, {Key: FieldLive, Value: 0}}

// findTasks returns the tasks matching filter without their parameters and
// output. A document without an ObjectId _id is skipped (nothing can be
// done to it by _id).
func (s *Store) findTasks(ctx context.Context, filter bson.D) ([]Task, error) {
	return s.collect(ctx, "find tasks", filter, options.Find().SetProjection(stateFields).SetBatchSize(oneReply))
}

// CancelUnstarted cancels a task of this node that is claimed but not yet
// running.
func (s *Store) CancelUnstarted(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: cancelled before it started\n"},
			{Key: FieldOutcome, Value: OutcomeCancelled}, {Key: FieldOutcomeReason, Value: "cancelled before it started"}}}})
	if err != nil {
		return false, fmt.Errorf("cancel task %s: %w", taskID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// CancelRunning records that a running task was cancelled by its node
// after its runner had to be killed: status -5, keeping what output there
// is.
func (s *Store) CancelRunning(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx, running(taskID, node, token),
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
			{Key: FieldOutcome, Value: OutcomeCancelled}, {Key: FieldOutcomeReason, Value: "cancelled; its runner did not stop in time and was killed"}}},
			{Key: "$unset", Value: bson.D{unsetLive}}})
	if err != nil {
		return false, fmt.Errorf("cancel task %s: %w", taskID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// NodesSeenOffers returns when each node last wrote its node document
// (zero when its timestamp is not a date) and, in the same read, what each
// node that writes one offers tasks' requests (resources.offer; Perl nodes
// and older den nodes write none and are left out).
func (s *Store) NodesSeenOffers(ctx context.Context) (map[string]time.Time, map[string]Resources, error) {
	cur, err := s.nodes.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "node", Value: 1}, {Key: "timestamp", Value: 1}, {Key: "resources.offer", Value: 1}}).SetBatchSize(oneReply))
	if err != nil {
		return nil, nil, fmt.Errorf("read node documents: %w", err)
	}
	defer cur.Close(ctx)
	out, offers := map[string]time.Time{}, map[string]Resources{}
	for cur.Next(ctx) {
		if n, ok := cur.Current.Lookup("node").StringValueOK(); ok {
			at, _ := timeValue(cur.Current.Lookup("timestamp"))
			out[n] = at
			var r Resources
			if doc, ok := cur.Current.Lookup("resources", "offer").DocumentOK(); ok && bson.Unmarshal(doc, &r) == nil {
				offers[n] = r
			}
		}
	}
	if err := cur.Err(); err != nil {
		return nil, nil, fmt.Errorf("read node documents: %w", err)
	}
	return out, offers, nil
}

// QueueDoc returns a queue, or nil when there is none. A queue document
// that cannot be used is an error.
func (s *Store) QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error) {
	raw, err := s.queues.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue %s: %w", id.Hex(), err)
	}
	q, err := ParseQueue(raw)
	if err != nil {
		return nil, fmt.Errorf("read queue %s: %w", id.Hex(), err)
	}
	return &q, nil
}
