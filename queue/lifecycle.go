package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Start moves a task this node claimed to running (status 0) and returns the
// document as it now stands. It returns ok false, and changes nothing, when
// the task is gone or no longer claimed by node (reaped, released, deleted):
// a runner must then not run it.
func (s *Store) Start(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (doc bson.Raw, ok bool, err error) {
	res := s.tasks.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusRunning}, {Key: "mtime", Value: now}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After))
	doc, err = res.Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("start task %s: %w", taskID.Hex(), err)
	}
	return doc, true, nil
}

// Result is what a runner writes into a finished task. Stdout and Stderr are
// each either a string (output stored in the task document) or the
// bson.ObjectID of a tasks.files document.
type Result struct {
	Status int
	Stdout any
	Stderr any
}

// Finish records the result of a task this node is running (status 0 ->
// Result.Status). It reports false, and writes nothing, when the task is no
// longer this node's running task: it was reaped or rescued meanwhile, and
// the state someone else gave it wins.
func (s *Store) Finish(ctx context.Context, taskID bson.ObjectID, node string, r Result, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusRunning}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: r.Status},
			{Key: "stdout", Value: r.Stdout},
			{Key: "stderr", Value: r.Stderr},
			{Key: "mtime", Value: now},
		}}})
	if err != nil {
		return false, fmt.Errorf("record result of task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// Task returns a task document, or nil when there is none.
func (s *Store) Task(ctx context.Context, taskID bson.ObjectID) (bson.Raw, error) {
	doc, err := s.tasks.FindOne(ctx, bson.D{{Key: "_id", Value: taskID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read task %s: %w", taskID.Hex(), err)
	}
	return doc, nil
}

// FailUnstarted fails a task this node claimed but cannot run (for example
// its document is malformed), with reason as its stderr.
func (s *Store) FailUnstarted(ctx context.Context, taskID bson.ObjectID, node, reason string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusFailed},
			{Key: "stdout", Value: ""},
			{Key: "stderr", Value: reason},
			{Key: "mtime", Value: now},
		}}})
	if err != nil {
		return false, fmt.Errorf("fail task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}
