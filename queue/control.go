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
	// FieldStartAfter: an ISODate before which the task is not claimed.
	FieldStartAfter = "start_after"
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
	Attempts       int
}

// seconds reads a non-negative number of seconds.
func seconds(v bson.RawValue) (time.Duration, bool) {
	f, ok := v.AsFloat64OK()
	if !ok || f < 0 || math.IsNaN(f) || f > 1e9 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// TaskOptions reads the control settings of a task; queue may be nil.
func TaskOptions(task, queue bson.Raw) Options {
	o := Options{RetryDelay: 10 * time.Second}
	lookup := func(field string) bson.RawValue {
		if v := task.Lookup(field); v.Type != 0 && v.Type != bson.TypeNull {
			return v
		}
		if queue != nil {
			return queue.Lookup(field)
		}
		return bson.RawValue{}
	}
	if d, ok := seconds(lookup(FieldTimeout)); ok {
		o.Timeout = d
	}
	if n, ok := intValue(lookup(FieldMaxRetries)); ok && n > 0 {
		o.MaxRetries = int(min(n, 1000))
	}
	if d, ok := seconds(lookup(FieldRetryDelay)); ok {
		o.RetryDelay = d
	}
	if d, ok := seconds(lookup(FieldMaxTermination)); ok {
		o.MaxTermination = d
	}
	if n, ok := intValue(lookup(FieldMaxOutput)); ok && n > 0 {
		o.MaxOutput = n
	}
	if n, ok := intValue(task.Lookup(FieldAttempts)); ok && n > 0 {
		o.Attempts = int(n)
	}
	return o
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
	Reason   string `bson:"reason,omitempty"`
	// Leftovers counts the processes of the run that den stopped after it
	// ended or its runner died.
	Leftovers int       `bson:"leftover_processes,omitempty"`
	Started   time.Time `bson:"started,omitempty"`
	Ended     time.Time `bson:"ended"`
	Stdout    any       `bson:"stdout"`
	Stderr    any       `bson:"stderr"`
}

// requeue is the update that puts a task back in its queue for another
// attempt, with the run recorded in its history.
func requeue(entry HistoryEntry, startAfter, now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusQueued},
			{Key: "node", Value: Unclaimed},
			{Key: FieldStartAfter, Value: startAfter},
			{Key: "mtime", Value: now},
		}},
		{Key: "$unset", Value: bson.D{{Key: "runner", Value: ""}}},
		{Key: "$inc", Value: bson.D{{Key: FieldAttempts, Value: 1}}},
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
// (-6). leftovers is how many processes of the dead run the caller stopped
// first; it is recorded in the history entry, or in the task. The update is conditional on the task being in exactly the state
// read (same node, status and run), so that when several live nodes rescue
// at once, one of them does it and the others change nothing. It returns
// the status the task now has, or 0 when someone else got there first.
func (s *Store) Rescue(ctx context.Context, task bson.Raw, queue bson.Raw, reason string, leftovers int, now time.Time) (int, error) {
	id, _ := task.Lookup("_id").ObjectIDOK()
	node := task.Lookup("node")
	st, _ := intValue(task.Lookup("status"))
	filter := bson.D{{Key: "_id", Value: id}, {Key: "node", Value: node}, {Key: "status", Value: st}}
	if r, ok := RunnerOf(task); ok {
		filter = append(filter, bson.E{Key: "runner.token", Value: r.Token})
	} else {
		filter = append(filter, bson.E{Key: "runner", Value: nil})
	}
	if mt := task.Lookup("mtime"); mt.Type != 0 {
		filter = append(filter, bson.E{Key: "mtime", Value: mt})
	}
	opts := TaskOptions(task, queue)
	var update bson.D
	newStatus := StatusOrphaned
	if v, _ := task.Lookup(FieldCancel).BooleanOK(); v {
		// Cancelled, and its runner is gone: it is cancelled, not orphaned
		// or retried.
		update = bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now}}}}
		newStatus = StatusCancelled
	} else if opts.Attempts < opts.MaxRetries {
		nodeName, _ := node.StringValueOK()
		entry := HistoryEntry{Attempt: opts.Attempts + 1, Node: nodeName, Status: StatusOrphaned, Reason: reason, Ended: now, Leftovers: leftovers}
		if r, ok := RunnerOf(task); ok {
			entry.Started = time.UnixMilli(r.Started)
		}
		update = requeue(entry, opts.RetryAt(now, opts.Attempts+1), now)
		newStatus = StatusQueued
	} else {
		set := bson.D{{Key: "status", Value: StatusOrphaned}, {Key: "mtime", Value: now}, {Key: "orphan_reason", Value: reason}}
		if leftovers > 0 {
			set = append(set, bson.E{Key: "leftover_processes", Value: leftovers})
		}
		update = bson.D{{Key: "$set", Value: set}}
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if err != nil {
		return 0, fmt.Errorf("rescue task %s: %w", id.Hex(), err)
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
	res, err := s.tasks.UpdateMany(ctx,
		bson.D{{Key: FieldCancel, Value: true}, {Key: "status", Value: StatusQueued}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: cancelled before it started\n"},
		}}})
	if err != nil {
		return 0, fmt.Errorf("cancel queued tasks: %w", err)
	}
	return res.ModifiedCount, nil
}

// Mine returns this node's claimed and running tasks, optionally only
// those with cancel set.
func (s *Store) Mine(ctx context.Context, node string, cancelled bool) ([]bson.Raw, error) {
	filter := bson.D{{Key: "node", Value: node}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}}}
	if cancelled {
		filter = append(filter, bson.E{Key: FieldCancel, Value: true})
	}
	return s.findTasks(ctx, filter)
}

// NodeTasks returns the claimed and running tasks of a node.
func (s *Store) NodeTasks(ctx context.Context, node any) ([]bson.Raw, error) {
	return s.findTasks(ctx, bson.D{{Key: "node", Value: node}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}}})
}

func (s *Store) findTasks(ctx context.Context, filter bson.D) ([]bson.Raw, error) {
	cur, err := s.tasks.Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("find tasks: %w", err)
	}
	defer cur.Close(ctx)
	var out []bson.Raw
	for cur.Next(ctx) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("find tasks: %w", err)
	}
	return out, nil
}

// CancelUnstarted cancels a task of this node that is claimed but not yet
// running.
func (s *Store) CancelUnstarted(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: cancelled before it started\n"}}}})
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
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now}}}})
	if err != nil {
		return false, fmt.Errorf("cancel task %s: %w", taskID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// DeadNodes returns the names of nodes whose document was last written
// before cutoff, other than self.
func (s *Store) DeadNodes(ctx context.Context, self string, cutoff time.Time) ([]string, error) {
	cur, err := s.nodes.Find(ctx, bson.D{{Key: "node", Value: bson.D{{Key: "$ne", Value: self}}}, {Key: "timestamp", Value: bson.D{{Key: "$lt", Value: cutoff}}}})
	if err != nil {
		return nil, fmt.Errorf("find dead nodes: %w", err)
	}
	defer cur.Close(ctx)
	var out []string
	for cur.Next(ctx) {
		if n, ok := cur.Current.Lookup("node").StringValueOK(); ok {
			out = append(out, n)
		}
	}
	return out, cur.Err()
}

// QueueDoc returns a queue document, or nil.
func (s *Store) QueueDoc(ctx context.Context, id bson.ObjectID) (bson.Raw, error) {
	raw, err := s.queues.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue %s: %w", id.Hex(), err)
	}
	return raw, nil
}
