package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/gridfs"
)

// This file holds an operator's cancel and retry of one task: the cancel
// flag a node acts on, and a retry that keeps the ended run in history.

// CancelOutcome says what Cancel did to one task.
type CancelOutcome int

const (
	CancelSet      CancelOutcome = iota // cancel: true was set
	CancelFinished                      // the task had already ended; nothing written
	CancelNoTask                        // there is no such task
)

// SetCancel sets cancel: true on a task that has not ended: a queued one never
// starts, a running one is stopped by its node (see
// docs/task-control.md). An ended task (finished, cancelled, orphaned) is left alone.
func (s *Store) SetCancel(ctx context.Context, id bson.ObjectID) (CancelOutcome, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "status", Value: bson.D{{Key: "$lte", Value: 0}, {Key: "$nin", Value: bson.A{StatusCancelled, StatusOrphaned}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: FieldCancel, Value: true}}}})
	if err != nil {
		return 0, fmt.Errorf("cancel task %s: %w", id.Hex(), err)
	}
	if res.MatchedCount == 1 {
		return CancelSet, nil
	}
	n, err := s.tasks.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return 0, fmt.Errorf("cancel task %s: %w", id.Hex(), err)
	}
	if n == 0 {
		return CancelNoTask, nil
	}
	return CancelFinished, nil
}

// retryable is the filter part that selects tasks a retry may put back:
// every status but queued, claimed and running.
func retryable() bson.D {
	return bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{StatusQueued, StatusClaimed, StatusRunning}}}}}
}

// RetryCandidates returns the tasks matching f that a retry would put
// back (not queued, claimed or running), newest first.
func (s *Store) RetryCandidates(ctx context.Context, f TaskFilter) ([]Task, error) {
	filter := append(f.bson(), bson.E{Key: "$and", Value: bson.A{retryable()}})
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: "node", Value: 1}})
	if f.Limit > 0 {
		opts.SetLimit(f.Limit)
	}
	return s.collect(ctx, "find tasks to retry", filter, opts)
}

// RetryEnded puts an ended task back in its queue to run again now: status -2,
// node -1, attempts 0 (a fresh retry budget), and den's per-run fields
// removed. The run that ended goes into the task's history as an automatic
// retry records it, marked retried_by "operator", with its output: a file
// id stays one; output kept in the task document is first copied to a
// GridFS file (Disbatch's layout, metadata.task_id), so that every run's
// output can still be read (den output --attempt, the page's history) once
// the new run replaces stdout and stderr. A task that never ran (cancelled
// while queued) has no run to record.
//
// The update is conditional on the status and mtime the task is read with
// here, so a task that changed meanwhile is left alone (false); a file
// written for it then stays, findable by its task_id. A task that had
// finished (status 1 and up) is counted in its queue's count_todo again;
// cancelled and orphaned tasks never left it.
func (s *Store) RetryEnded(ctx context.Context, t Task, now time.Time) (bool, error) {
	if !t.StatusOK || t.Status == StatusQueued || t.Status == StatusClaimed || t.Status == StatusRunning {
		return false, nil
	}
	// The whole document: t may be a projection (RetryCandidates).
	full, err := s.Task(ctx, t.ID)
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if full == nil || !full.StatusOK || full.Status != t.Status {
		return false, nil
	}
	filter := bson.D{{Key: "_id", Value: t.ID}, {Key: "status", Value: t.Status}}
	if full.mtimeRaw.Type != 0 {
		filter = append(filter, bson.E{Key: "mtime", Value: full.mtimeRaw})
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusQueued}, {Key: "node", Value: Unclaimed}, {Key: FieldAttempts, Value: 0}, {Key: "mtime", Value: now}}},
		{Key: "$unset", Value: bson.D{{Key: FieldStartAfter, Value: ""}, {Key: FieldCancel, Value: ""}, {Key: "timed_out", Value: ""},
			{Key: "exit_code", Value: ""}, {Key: "signal", Value: ""}, {Key: "orphan_reason", Value: ""}, {Key: "runner", Value: ""}, {Key: FieldTimeouts, Value: ""}, {Key: FieldExpired, Value: ""},
			{Key: FieldOutcome, Value: ""}, {Key: FieldOutcomeReason, Value: ""}, {Key: "leftover_processes", Value: ""}, unsetLive, {Key: FieldLiveUntil, Value: ""}, {Key: FieldUnfit, Value: ""},
			{Key: FieldUniqueUntil, Value: ""}}},
	}
	entry, ran, err := s.endedRun(ctx, *full, now)
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if ran {
		update = append(update, bson.E{Key: "$push", Value: bson.D{{Key: FieldHistory, Value: entry}}})
	}
	// A task that held a unique key takes it back, or is refused while
	// another unfinished task of its queue holds it (unique.go).
	key := stringField(full.Raw, FieldUniqueKeyFreed)
	if key != "" {
		update = append(update, bson.E{Key: "$rename", Value: bson.D{{Key: FieldUniqueKeyFreed, Value: FieldUniqueKey}}})
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if key != "" && IsDuplicateKey(err) {
		held, herr := s.KeyHolder(context.WithoutCancel(ctx), full.Queue, key)
		if herr != nil {
			return false, fmt.Errorf("retry task %s: %v (%w)", t.ID.Hex(), held, herr)
		}
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), held)
	}
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	if Finished(t.Status) {
		_, err := s.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: t.Queue}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}}}})
		if err != nil {
			return true, fmt.Errorf("count retried task %s in its queue: %w (run den counts fix)", t.ID.Hex(), err)
		}
	}
	return true, nil
}

// RetriedByOperator is a history entry's retried_by when an operator put
// the task back (den task retry, the page); automatic retries leave it out.
const RetriedByOperator = "operator"

// endedRun is the history entry of the run an ended task records, and
// whether it ran at all (a node claimed it, or it has output).
func (s *Store) endedRun(ctx context.Context, t Task, now time.Time) (HistoryEntry, bool, error) {
	stdout, stderr := t.Raw.Lookup(StreamStdout), t.Raw.Lookup(StreamStderr)
	if t.Node == "" && absent(stdout) && absent(stderr) && t.Runner == nil {
		return HistoryEntry{}, false, nil
	}
	e := HistoryEntry{Attempt: t.Attempts + 1, Node: t.Node, Status: t.Status, RetriedBy: RetriedByOperator, Ended: t.Mtime,
		Outcome: stringField(t.Raw, FieldOutcome), Reason: stringField(t.Raw, FieldOutcomeReason)}
	if e.Ended.IsZero() {
		e.Ended = now
	}
	if e.Reason == "" {
		e.Reason = stringField(t.Raw, "orphan_reason")
	}
	if n, ok := t.Raw.Lookup("exit_code").AsInt64OK(); ok {
		code := int(n)
		e.ExitCode = &code
	}
	e.Signal = stringField(t.Raw, "signal")
	e.TimedOut, _ = t.Raw.Lookup("timed_out").BooleanOK()
	if n, ok := t.Raw.Lookup("leftover_processes").AsInt64OK(); ok {
		e.Leftovers = int(n)
	}
	if t.Runner != nil {
		e.Started = t.Runner.RunStart()
	}
	if u, ok := UsageOf(t.Raw); ok {
		e.Usage = &u
	}
	if t.Control.Requested != nil {
		r := *t.Control.Requested
		e.Requested = &r
	}
	var err error
	if e.Stdout, err = s.outputFile(ctx, t.ID, StreamStdout, stdout); err != nil {
		return e, true, err
	}
	e.Stderr, err = s.outputFile(ctx, t.ID, StreamStderr, stderr)
	return e, true, err
}

// outputFile is where a history entry finds a run's output stream: its
// GridFS file id, after copying text kept in the task document into a
// file of its own; nil when the run wrote none.
func (s *Store) outputFile(ctx context.Context, task bson.ObjectID, stream string, v bson.RawValue) (any, error) {
	switch v.Type {
	case bson.TypeObjectID:
		return v.ObjectID(), nil
	case bson.TypeString:
		id, err := gridfs.NewBucket(s.db, GridFSPrefix).Put(ctx, stream, bson.D{{Key: "task_id", Value: task}}, []byte(v.StringValue()))
		if err != nil {
			return nil, fmt.Errorf("keep the run's %s in GridFS: %w", stream, err)
		}
		return id, nil
	}
	return nil, nil
}

// stringField is a string field of doc; "" when absent or not a string.
func stringField(doc bson.Raw, key string) string {
	s, _ := doc.Lookup(key).StringValueOK()
	return s
}
