package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
)

// RunnerInfo identifies the task runner working on a task; it is stored in
// the task's runner field (den's own, ignored by Disbatch 4 nodes). Token is
// new for every start, so that every later write of that runner, and every
// rescue of its task, is conditional on that very run: a runner cut off
// from the database can never overwrite what happened to its task since.
type RunnerInfo struct {
	Token bson.ObjectID `bson:"token"`
	PID   int           `bson:"pid"`
	// Started is the runner process's start time in milliseconds since the
	// epoch, so that a pid reused by another process is told apart.
	Started int64  `bson:"started"`
	Host    string `bson:"host"`
	// At is when the run started the task (the runner's clock): the end
	// of the wait from insert to start.
	At time.Time `bson:"at,omitempty"`
	// Beat is when the runner last said it is alive; it beats while its
	// task runs, so a stopped node's runners are not taken for dead.
	Beat time.Time `bson:"beat,omitempty"`
}

// LastSign is the last time the run was known alive: its beat, else the
// run's start, else (a runner that wrote no at) its process's start. A
// runner serves several tasks one after another, so its process may have
// started long before this run.
func (r RunnerInfo) LastSign() time.Time {
	if !r.Beat.IsZero() {
		return r.Beat
	}
	return r.RunStart()
}

// RunStart is when the run began: at, else (a runner that wrote no at) its
// process's start.
func (r RunnerInfo) RunStart() time.Time {
	if !r.At.IsZero() {
		return r.At
	}
	return time.UnixMilli(r.Started)
}

// Lease is what a run's heartbeat found of its task.
type Lease int

const (
	// LeaseHeld: the task is still this run's, and not cancelled.
	LeaseHeld Lease = iota
	// LeaseCancelled: the task is this run's, and cancel is set.
	LeaseCancelled
	// LeaseLost: the task is no longer this run's: rescued, retried,
	// ended or deleted by someone else.
	LeaseLost
)

// WriteBeat records that a run is alive (runner.beat = now, the server's time
// by the runner's clock) and says whether it still holds its task. One
// update while it does; one more read when it does not, to tell a cancel
// apart from a loss.
func (s *Store) WriteBeat(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, now time.Time) (Lease, error) {
	held := append(running(taskID, node, token), bson.E{Key: FieldCancel, Value: bson.D{{Key: "$ne", Value: true}}})
	res, err := s.tasks.UpdateOne(ctx, held, bson.D{{Key: "$set", Value: bson.D{{Key: "runner.beat", Value: now}}}})
	if err != nil {
		return LeaseHeld, fmt.Errorf("heartbeat of task %s: %w", taskID.Hex(), err)
	}
	if res.MatchedCount == 1 {
		return LeaseHeld, nil
	}
	n, err := s.tasks.CountDocuments(ctx, running(taskID, node, token))
	if err != nil {
		return LeaseHeld, fmt.Errorf("heartbeat of task %s: %w", taskID.Hex(), err)
	}
	if n == 1 {
		return LeaseCancelled, nil
	}
	return LeaseLost, nil
}

// Start moves a task this node claimed to running (status 0), recording
// the runner, and returns the task as it now stands. It returns ok false,
// and changes nothing, when the task is gone or no longer claimed by node
// (reaped, released, deleted): a runner must then not run it.
func (s *Store) Start(ctx context.Context, taskID bson.ObjectID, node string, runner RunnerInfo, now time.Time) (task *Task, ok bool, err error) {
	res := s.tasks.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		// A run's usage is its own: an earlier run's (kept in history)
		// goes.
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusRunning}, {Key: "mtime", Value: now}, {Key: "runner", Value: runner}}},
			{Key: "$unset", Value: bson.D{{Key: FieldUsage, Value: ""}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After))
	doc, err := res.Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		// An earlier attempt may have landed with its reply lost.
		t, err := s.Task(ctx, taskID)
		if err != nil || t == nil {
			return nil, false, err
		}
		if t.Runner != nil && t.Runner.Token == runner.Token && t.Status == StatusRunning {
			return t, true, nil
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("start task %s: %w", taskID.Hex(), err)
	}
	t, err := DecodeTask(doc)
	if err != nil {
		return nil, false, fmt.Errorf("start task %s: %w", taskID.Hex(), err)
	}
	return &t, true, nil
}

// Result is what a runner writes into a finished task. Stdout and Stderr are
// each either a string (output stored in the task document) or the
// bson.ObjectID of a tasks.files document. Extra holds more fields to set
// (timed_out, exit_code, ...).
type Result struct {
	Status int
	Stdout any
	Stderr any
	Extra  bson.D
	// KeyHold is how long the task's unique_key stays held once it ended
	// (KeyHold of the task: its unique_for); 0 frees it with the result.
	KeyHold time.Duration
}

// running matches the task while it is still the given run of node.
func running(taskID bson.ObjectID, node string, token bson.ObjectID) bson.D {
	return bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusRunning}, {Key: "runner.token", Value: token}}
}

// Finish records the result of a task this run is running (status 0 ->
// Result.Status). It reports false, and writes nothing, when the task is no
// longer this run's: it was reaped, rescued, retried or cancelled meanwhile,
// and the state someone else gave it wins.
func (s *Store) Finish(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, r Result, now time.Time) (bool, error) {
	set := bson.D{
		{Key: "status", Value: r.Status},
		{Key: "stdout", Value: r.Stdout},
		{Key: "stderr", Value: r.Stderr},
		{Key: "mtime", Value: now},
	}
	hold := Ended(r.Status) && r.KeyHold > 0
	if hold { // the key stays held a while yet (uniquefor.go)
		set = append(set, bson.E{Key: FieldUniqueUntil, Value: now.Add(r.KeyHold)})
	}
	update := bson.D{{Key: "$set", Value: append(set, r.Extra...)}, {Key: "$unset", Value: bson.D{unsetLive}}}
	if Ended(r.Status) && !hold {
		update = append(update, freeKey) // the task's unique_key, if any, is free again (unique.go)
	}
	res, err := s.tasks.UpdateOne(ctx, running(taskID, node, token), update)
	if err != nil {
		return false, fmt.Errorf("record result of task %s: %w", taskID.Hex(), err)
	}
	if res.MatchedCount == 1 {
		return true, nil
	}
	// An earlier attempt may have landed with its reply lost: the task then
	// has this run's token and the result's status.
	t, err := s.Task(ctx, taskID)
	if err != nil || t == nil {
		return false, err
	}
	return t.Runner != nil && t.Runner.Token == token && t.Status == r.Status, nil
}

// TooLarge reports whether err says a document would exceed MongoDB's
// size limit (the result does not fit in the task document): the
// server's codes for it, or the driver's own refusal to send one. By
// identity, never by text.
func TooLarge(err error) bool {
	if errors.Is(err, driver.ErrDocumentTooLarge) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, code := range []int{10334, 17419, 17420} {
			if se.HasErrorCode(code) {
				return true
			}
		}
	}
	return false
}

// Task returns a task, or nil when there is none.
func (s *Store) Task(ctx context.Context, taskID bson.ObjectID) (*Task, error) {
	doc, err := s.tasks.FindOne(ctx, bson.D{{Key: "_id", Value: taskID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read task %s: %w", taskID.Hex(), err)
	}
	t, err := DecodeTask(doc)
	if err != nil {
		return nil, fmt.Errorf("read task %s: %w", taskID.Hex(), err)
	}
	return &t, nil
}
