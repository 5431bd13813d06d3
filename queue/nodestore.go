package queue

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// NodeStore is what a node does to the database: claim, release and hand
// over tasks, write its node document, rescue what dead runners and nodes
// left, and keep the database in order (counts, dependencies, malformed
// and irregular documents, schedules, retention, stats).
type NodeStore conn

// NewNodeStore returns a node's store of a database.
func NewNodeStore(db *mongo.Database) *NodeStore { return (*NodeStore)(newConn(db)) }

// What follows is shared with other roles: written once, on conn.

// Task returns a task, or nil when there is none.
func (s *NodeStore) Task(ctx context.Context, taskID bson.ObjectID) (*Task, error) {
	return (*conn)(s).Task(ctx, taskID)
}

// NodeTasks returns the claimed and running tasks of a node (its name as stored, which need not be a string), at most NodeTasksLimit of them.
func (s *NodeStore) NodeTasks(ctx context.Context, node any) ([]Task, error) {
	return (*conn)(s).NodeTasks(ctx, node)
}

// NodesSeenOffers returns when each node last wrote its node document (zero when its timestamp is not a date) and, in the same read, what each node that writes one offers tasks' requests (resources.offer; Perl nodes and older den nodes write none and are left out).
func (s *NodeStore) NodesSeenOffers(ctx context.Context) (map[string]time.Time, map[string]Resources, error) {
	return (*conn)(s).NodesSeenOffers(ctx)
}

// QueueDoc returns a queue, or nil when there is none.
func (s *NodeStore) QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error) {
	return (*conn)(s).QueueDoc(ctx, id)
}

// Queues reads every queue document, the fields den reads only (queueProjection): a node reads them every pass, and a queue document may hold anything else, up to 16 MiB.
func (s *NodeStore) Queues(ctx context.Context) ([]Queue, []MalformedQueue, error) {
	return (*conn)(s).Queues(ctx)
}

// RetirePage is RetireCandidates that also returns how many tasks it read, and the _id of the last (zero when none), those left out included: the next page starts after last (AfterID), and a page that read fewer than f.Limit was the last.
func (s *NodeStore) RetirePage(ctx context.Context, f RetireFilter) (tasks []Task, read int, last bson.ObjectID, err error) {
	return (*conn)(s).RetirePage(ctx, f)
}

// RetireTasks removes tasks (as RetireCandidates returned them) by mode, and lowers their queues' counts.
func (s *NodeStore) RetireTasks(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error) {
	return (*conn)(s).RetireTasks(ctx, tasks, mode)
}

// RunningAll counts the claimed and running tasks of every queue, by queue and node, whatever the number of queues (one aggregation by status).
func (s *NodeStore) RunningAll(ctx context.Context) (Running, error) {
	return (*conn)(s).RunningAll(ctx)
}

// DecrementTodo counts one task of a queue as done.
func (s *NodeStore) DecrementTodo(ctx context.Context, queueID bson.ObjectID) error {
	return (*conn)(s).DecrementTodo(ctx, queueID)
}

// Statuses returns the status of each of the given tasks that exists (a status that is not a number counts as 0: not ended).
func (s *NodeStore) Statuses(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]int, error) {
	return (*conn)(s).Statuses(ctx, ids)
}

// MarkDependents sets has_dependents on the given tasks, so that their runners release what comes after them as soon as they end.
func (s *NodeStore) MarkDependents(ctx context.Context, ids []bson.ObjectID) error {
	return (*conn)(s).MarkDependents(ctx, ids)
}

// SettleDependents is the one rule for what comes after tasks that ended: a task that succeeded is removed from its dependents' waiting lists and those that then wait for nothing are queued; a task that ended any other way for good (EndedBadly) has its dependents cancelled, transitively, with DependencyEndedReason as the reason.
func (s *NodeStore) SettleDependents(ctx context.Context, ended []EndedTask, now time.Time) (released int64, cancelled []bson.ObjectID, err error) {
	return (*conn)(s).SettleDependents(ctx, ended, now)
}

// CancelDependents cancels (-5) the registered tasks that wait for any of ids, which ended for good without succeeding (why says how), and then the tasks that wait for those, and so on.
func (s *NodeStore) CancelDependents(ctx context.Context, ids []bson.ObjectID, why string, now time.Time) ([]bson.ObjectID, error) {
	return (*conn)(s).CancelDependents(ctx, ids, why, now)
}
