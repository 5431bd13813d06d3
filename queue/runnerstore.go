package queue

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// RunnerStore is what the runner of one task does to the database: start
// the task, keep its lease, publish its output and usage, finish or retry
// it and release what comes after it.
type RunnerStore conn

// NewRunnerStore returns a task runner's store of a database.
func NewRunnerStore(db *mongo.Database) *RunnerStore { return (*RunnerStore)(newConn(db)) }

// What follows is shared with other roles: written once, on conn.

// Task returns a task, or nil when there is none.
func (s *RunnerStore) Task(ctx context.Context, taskID bson.ObjectID) (*Task, error) {
	return (*conn)(s).Task(ctx, taskID)
}

// QueueDoc returns a queue, or nil when there is none.
func (s *RunnerStore) QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error) {
	return (*conn)(s).QueueDoc(ctx, id)
}

// DecrementTodo counts one task of a queue as done.
func (s *RunnerStore) DecrementTodo(ctx context.Context, queueID bson.ObjectID) error {
	return (*conn)(s).DecrementTodo(ctx, queueID)
}

// SettleDependents is the one rule for what comes after tasks that ended: a task that succeeded is removed from its dependents' waiting lists and those that then wait for nothing are queued; a task that ended any other way for good (EndedBadly) has its dependents cancelled, transitively, with DependencyEndedReason as the reason.
func (s *RunnerStore) SettleDependents(ctx context.Context, ended []EndedTask, now time.Time) (released int64, cancelled []bson.ObjectID, err error) {
	return (*conn)(s).SettleDependents(ctx, ended, now)
}
