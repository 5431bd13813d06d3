package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Dependencies: a task may list the tasks it
// comes after. It waits blocked (status -4, which no node of either kind
// claims) until all of them succeeded (status 1), and is then queued (-2);
// when one of them ends any other way for good (failed, cancelled,
// orphaned), it is cancelled (-5) with the reason, and so are the tasks
// that come after it. The claim is unchanged: a waiting task is simply
// not queued.
//
// Fields, all optional and ignored by a Perl Disbatch node:
//   - after: the ids of the tasks it comes after, given when it is created.
//   - waiting: those not yet succeeded, kept by den. A dependency's success
//     is pulled from it ($pullAll, so doing it twice does no harm: a node that
//     crashes half way, or two nodes doing it at once, leave it right).
//   - after_was: after as den registered it; an after changed later is an
//     error, not a silent change of plan.
//   - has_dependents: set on a task others come after, so that its runner
//     releases them the moment it ends; the periodic sweep (every
//     sweep_every) does it for whatever ends elsewhere.
const (
	FieldAfter         = "after"
	FieldWaiting       = "waiting"
	FieldAfterWas      = "after_was"
	FieldHasDependents = "has_dependents"
)

// Blocked is a task that waits for others.
type Blocked struct {
	ID      bson.ObjectID
	Queue   bson.ObjectID
	Status  int
	After   []bson.ObjectID
	Problem string // why after cannot be read; "" when it can
	// Waiting and AfterWas are nil until den registered the task.
	Waiting    []bson.ObjectID
	AfterWas   []bson.ObjectID
	Registered bool
}

// BlockedTasks returns up to limit tasks of the given queues that wait
// for others (status -4 with after). The claim index {node, status, queue}
// serves it. A queued task (-2) with after is not looked at: any node may
// have claimed it already, and looking would scan a queue's whole backlog.
func (s *Store) BlockedTasks(ctx context.Context, queueIDs []bson.ObjectID, limit int64) ([]Blocked, error) {
	if len(queueIDs) == 0 {
		return nil, nil
	}
	filter := bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusBlocked},
		{Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}}, {Key: FieldAfter, Value: bson.D{{Key: "$exists", Value: true}}}}
	cur, err := s.tasks.Find(ctx, filter, options.Find().SetLimit(limit).SetBatchSize(oneReply).SetProjection(bson.D{
		{Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: FieldAfter, Value: 1}, {Key: FieldWaiting, Value: 1}, {Key: FieldAfterWas, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find tasks waiting for others: %w", err)
	}
	defer cur.Close(ctx)
	var out []Blocked
	for cur.Next(ctx) {
		raw := cur.Current
		id, ok := raw.Lookup("_id").ObjectIDOK()
		if !ok {
			continue
		}
		b := Blocked{ID: id}
		b.Queue, _ = raw.Lookup("queue").ObjectIDOK()
		st, _ := intValue(raw.Lookup("status"))
		b.Status = int(st)
		b.After, b.Problem = idList(raw.Lookup(FieldAfter))
		if v := raw.Lookup(FieldAfterWas); v.Type != 0 {
			b.Registered = true
			b.AfterWas, _ = idList(v)
			b.Waiting, _ = idList(raw.Lookup(FieldWaiting))
		}
		out = append(out, b)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("find tasks waiting for others: %w", err)
	}
	return out, nil
}

// idList reads a list of task ids: an array of ObjectIds, or one ObjectId.
func idList(v bson.RawValue) ([]bson.ObjectID, string) {
	if id, ok := v.ObjectIDOK(); ok {
		return []bson.ObjectID{id}, ""
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, fmt.Sprintf("after is %s; it must be an array of task ids (ObjectIds)", describe(v))
	}
	vals, _ := arr.Values()
	ids := make([]bson.ObjectID, 0, len(vals))
	for _, e := range vals {
		id, ok := e.ObjectIDOK()
		if !ok {
			return nil, fmt.Sprintf("after holds %s; it must hold task ids (ObjectIds)", describe(e))
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, ""
}

// Statuses returns the status of each of the given tasks that exists (a
// status that is not a number counts as 0: not ended).
func (s *Store) Statuses(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]int, error) {
	out := map[bson.ObjectID]int{}
	for len(ids) > 0 {
		n := min(len(ids), 10000)
		cur, err := s.tasks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids[:n]}}}},
			options.Find().SetProjection(bson.D{{Key: "status", Value: 1}}).SetBatchSize(oneReply))
		if err != nil {
			return nil, fmt.Errorf("read the status of dependencies: %w", err)
		}
		for cur.Next(ctx) {
			id, ok := cur.Current.Lookup("_id").ObjectIDOK()
			if !ok {
				continue
			}
			st, _ := intValue(cur.Current.Lookup("status"))
			out[id] = int(st)
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the status of dependencies: %w", err)
		}
		ids = ids[n:]
	}
	return out, nil
}

// EndedBadly reports whether a task with this status has ended for good
// without succeeding: a task that comes after it can never run.
func EndedBadly(status int) bool {
	return Ended(status) && status != StatusSucceeded
}

// MarkWaiting records that b waits for waiting (those of its after not yet
// succeeded): status -4, waiting, after_was. It is conditional on b still
// being unclaimed, in the status read, and not yet registered.
func (s *Store) MarkWaiting(ctx context.Context, b Blocked, waiting []bson.ObjectID) (bool, error) {
	if waiting == nil {
		waiting = []bson.ObjectID{}
	}
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: b.ID}, {Key: "node", Value: Unclaimed}, {Key: "status", Value: b.Status},
			{Key: FieldAfterWas, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusBlocked}, {Key: FieldWaiting, Value: waiting}, {Key: FieldAfterWas, Value: b.After}}}})
	if err != nil {
		return false, fmt.Errorf("register the dependencies of task %s: %w", b.ID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// MarkDependents sets has_dependents on the given tasks, so that their
// runners release what comes after them as soon as they end.
func (s *Store) MarkDependents(ctx context.Context, ids []bson.ObjectID) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.tasks.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: FieldHasDependents, Value: true}}}})
	if err != nil {
		return fmt.Errorf("mark tasks with dependents: %w", err)
	}
	return nil
}

// EndedTask is a task that ended for good, with its status: what
// SettleDependents settles the dependents of.
type EndedTask struct {
	ID     bson.ObjectID
	Status int
}

// SettleDependents is the one rule for what comes after tasks that ended:
// a task that succeeded is removed from its dependents' waiting lists and
// those that then wait for nothing are queued (releaseDependents); a task that
// ended any other way for good (EndedBadly) has its dependents cancelled,
// transitively, with DependencyEndedReason as the reason. A status that is
// neither (still running, queued) settles nothing. The task runner calls
// it for its task at the end of a run, and the nodes' sweep for whatever
// a runner missed; doing it twice changes nothing more.
func (s *Store) SettleDependents(ctx context.Context, ended []EndedTask, now time.Time) (released int64, cancelled []bson.ObjectID, err error) {
	var succeeded []bson.ObjectID
	for _, e := range ended {
		switch {
		case e.Status == StatusSucceeded:
			succeeded = append(succeeded, e.ID)
		case EndedBadly(e.Status):
			ids, err := s.CancelDependents(ctx, []bson.ObjectID{e.ID}, DependencyEndedReason(e.ID, e.Status), now)
			cancelled = append(cancelled, ids...)
			if err != nil {
				return 0, cancelled, err
			}
		}
	}
	released, err = s.releaseDependents(ctx, succeeded, now)
	return released, cancelled, err
}

// DependencyEndedReason is why a task is cancelled when task id, which
// it comes after, ended with status without succeeding.
func DependencyEndedReason(id bson.ObjectID, status int) string {
	return fmt.Sprintf("task %s, which it comes after, ended with status %d (%s)", id.Hex(), status, StatusName(status))
}

// releaseDependents removes tasks that succeeded from the waiting lists of the
// tasks that come after them, and queues (-2) each task that then waits
// for nothing. Doing it twice changes nothing more.
func (s *Store) releaseDependents(ctx context.Context, ids []bson.ObjectID, now time.Time) (released int64, err error) {
	if len(ids) == 0 {
		return 0, nil
	}
	_, err = s.tasks.UpdateMany(ctx,
		bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusBlocked}, {Key: FieldWaiting, Value: bson.D{{Key: "$in", Value: ids}}}},
		bson.D{{Key: "$pullAll", Value: bson.D{{Key: FieldWaiting, Value: ids}}}})
	if err != nil {
		return 0, fmt.Errorf("release the tasks that come after %d succeeded: %w", len(ids), err)
	}
	return s.releaseReady(ctx, now)
}

// releaseReady queues (-2) every registered blocked task that waits for
// nothing.
func (s *Store) releaseReady(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.tasks.UpdateMany(ctx,
		bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusBlocked}, {Key: FieldWaiting, Value: bson.D{{Key: "$size", Value: 0}}},
			{Key: FieldAfterWas, Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusQueued}, {Key: "mtime", Value: now}}}})
	if err != nil {
		return 0, fmt.Errorf("queue tasks whose dependencies succeeded: %w", err)
	}
	s.forgetCandidates(res.ModifiedCount)
	return res.ModifiedCount, nil
}

// CancelDependents cancels (-5) the registered tasks that wait for any of
// ids, which ended for good without succeeding (why says how), and then
// the tasks that wait for those, and so on. It returns the ids it
// cancelled.
func (s *Store) CancelDependents(ctx context.Context, ids []bson.ObjectID, why string, now time.Time) ([]bson.ObjectID, error) {
	var all []bson.ObjectID
	for len(ids) > 0 {
		filter := bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusBlocked}, {Key: FieldWaiting, Value: bson.D{{Key: "$in", Value: ids}}}}
		cur, err := s.tasks.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(oneReply))
		if err != nil {
			return all, fmt.Errorf("find the tasks that come after a failed one: %w", err)
		}
		var next []bson.ObjectID
		for cur.Next(ctx) {
			if id, ok := cur.Current.Lookup("_id").ObjectIDOK(); ok {
				next = append(next, id)
			}
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return all, fmt.Errorf("find the tasks that come after a failed one: %w", err)
		}
		if len(next) == 0 {
			break
		}
		reason := why
		_, err = s.tasks.UpdateMany(ctx, append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: next}}}),
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusCancelled}, {Key: "mtime", Value: now},
				{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: cancelled before it started: " + reason + "\n"},
				{Key: FieldOutcome, Value: OutcomeCancelled}, {Key: FieldOutcomeReason, Value: reason}}}})
		if err != nil {
			return all, fmt.Errorf("cancel the tasks that come after a failed one: %w", err)
		}
		all = append(all, next...)
		ids = next
		why = "a task it comes after was cancelled because " + why
	}
	return all, nil
}

// FailBlocked fails (2) a task whose dependencies cannot be: after is not a
// list of task ids, names a task that does not exist, names itself, was
// changed after den registered it, or closes a cycle. The reason goes to
// its stderr; it is conditional on the task being unclaimed in the status
// read.
func (s *Store) FailBlocked(ctx context.Context, b Blocked, reason string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: b.ID}, {Key: "node", Value: Unclaimed}, {Key: "status", Value: b.Status}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusFailed}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: task not run: " + reason + "\n"},
			{Key: FieldOutcome, Value: OutcomeMalformed}, {Key: FieldOutcomeReason, Value: reason}}}})
	if err != nil {
		return false, fmt.Errorf("fail task %s: %w", b.ID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}
