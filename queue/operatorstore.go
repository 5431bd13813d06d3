package queue

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// OperatorStore is what operators do to the database, through den's
// command line, its web pages and the Disbatch web API: queues, tasks,
// schedules and node documents, read, changed, cancelled and retried.
type OperatorStore conn

// NewOperatorStore returns an operator's store of a database.
func NewOperatorStore(db *mongo.Database) *OperatorStore { return (*OperatorStore)(newConn(db)) }

// What follows is shared with other roles: written once, on conn.

// Task returns a task, or nil when there is none.
func (s *OperatorStore) Task(ctx context.Context, taskID bson.ObjectID) (*Task, error) {
	return (*conn)(s).Task(ctx, taskID)
}

// NodeTasks returns the claimed and running tasks of a node (its name as stored, which need not be a string), at most NodeTasksLimit of them.
func (s *OperatorStore) NodeTasks(ctx context.Context, node any) ([]Task, error) {
	return (*conn)(s).NodeTasks(ctx, node)
}

// QueueDoc returns a queue, or nil when there is none.
func (s *OperatorStore) QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error) {
	return (*conn)(s).QueueDoc(ctx, id)
}

// Queues reads every queue document, the fields den reads only (queueProjection): a node reads them every pass, and a queue document may hold anything else, up to 16 MiB.
func (s *OperatorStore) Queues(ctx context.Context) ([]Queue, []MalformedQueue, error) {
	return (*conn)(s).Queues(ctx)
}

// RetireTasks removes tasks (as RetireCandidates returned them) by mode, and lowers their queues' counts.
func (s *OperatorStore) RetireTasks(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error) {
	return (*conn)(s).RetireTasks(ctx, tasks, mode)
}

// TaskCounts counts every queue's tasks by status (only the tasks of the queues in only, when it names any), in one aggregation.  The grouping is on plain fields: FerretDB (the embedded development server) does not implement $cond inside $group.
func (s *OperatorStore) TaskCounts(ctx context.Context, only ...bson.ObjectID) (map[bson.ObjectID]StatusCounts, error) {
	return (*conn)(s).TaskCounts(ctx, only...)
}

// RunningAll counts the claimed and running tasks of every queue, by queue and node, whatever the number of queues (one aggregation by status).
func (s *OperatorStore) RunningAll(ctx context.Context) (Running, error) {
	return (*conn)(s).RunningAll(ctx)
}

// Statuses returns the status of each of the given tasks that exists (a status that is not a number counts as 0: not ended).
func (s *OperatorStore) Statuses(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]int, error) {
	return (*conn)(s).Statuses(ctx, ids)
}

// MarkDependents sets has_dependents on the given tasks, so that their runners release what comes after them as soon as they end.
func (s *OperatorStore) MarkDependents(ctx context.Context, ids []bson.ObjectID) error {
	return (*conn)(s).MarkDependents(ctx, ids)
}
