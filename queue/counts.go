package queue

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Running holds how many tasks are claimed or running (status -1 or 0), per
// queue and node.
type Running map[bson.ObjectID]map[string]int

// Queue returns the number of running tasks of a queue on all nodes.
func (r Running) Queue(id bson.ObjectID) int {
	n := 0
	for _, c := range r[id] {
		n += c
	}
	return n
}

// Node returns the number of running tasks of node in queue id.
func (r Running) Node(id bson.ObjectID, node string) int { return r[id][node] }

// NodeTotal returns the number of running tasks of node in all queues.
func (r Running) NodeTotal(node string) int {
	n := 0
	for _, byNode := range r {
		n += byNode[node]
	}
	return n
}

// RunningAll counts the claimed and running tasks of every queue, grouped
// by queue and node: one aggregation by status (two on FerretDB:
// statusConditions), which MongoDB answers from the {status, _id} index
// and the development server from its status index, whatever the number
// of queues. What it costs follows the tasks claimed and running, not the
// queues nor the tasks kept.
func (s *Store) RunningAll(ctx context.Context) (Running, error) {
	out := Running{}
	conds, err := s.statusConditions(ctx, StatusClaimed, StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("count running tasks: %w", err)
	}
	for _, st := range conds {
		if err := s.countRunning(ctx, nil, st, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// countRunning adds to out the tasks of the given queues (nil: of every
// queue) whose status meets cond, by queue and node.
func (s *Store) countRunning(ctx context.Context, queueIDs []bson.ObjectID, cond any, out Running) error {
	match := bson.D{{Key: "status", Value: cond}}
	if queueIDs != nil {
		match = append(bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}}}, match...)
	}
	cur, err := s.tasks.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: match}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "node", Value: "$node"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	}, options.Aggregate().SetBatchSize(oneReply))
	if err != nil {
		return fmt.Errorf("count running tasks: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		// Read field by field: a task may hold anything in queue and node
		// (an array holding the queue's id matches the $in), and such a
		// task is no queue's.
		group, _ := cur.Current.Lookup("_id").DocumentOK()
		q, ok := group.Lookup("queue").ObjectIDOK()
		if !ok {
			continue
		}
		node, _ := group.Lookup("node").StringValueOK()
		n, _ := intValue(cur.Current.Lookup("n"))
		if out[q] == nil {
			out[q] = map[string]int{}
		}
		out[q][node] += int(n)
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("count running tasks: %w", err)
	}
	return nil
}

// FillCounts sets count_total and count_todo of the given queues where
// they are null or missing, or hold something other than a number
// (Queue.BadCounts), from their tasks: count_todo counts the tasks with a
// status of 0 or less. It costs one aggregation over those queues' tasks
// and one bulk write, however many queues it is given; callers bound the
// number (a node fills at most FillCountsBatch a pass). A count someone
// else set meanwhile is left as is. It returns how many counts it wrote.
func (s *Store) FillCounts(ctx context.Context, qs []Queue) (int64, error) {
	var ids []bson.ObjectID
	for _, q := range qs {
		if q.CountTodo == nil || q.CountTotal == nil {
			ids = append(ids, q.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	counts, err := s.TaskCounts(ctx, ids...)
	if err != nil {
		return 0, fmt.Errorf("fill the counts of %d queues: %w", len(ids), err)
	}
	var models []mongo.WriteModel
	fill := func(q Queue, field string, n int64) {
		cond := bson.D{{Key: field, Value: nil}}
		if slices.Contains(q.BadCounts, field) {
			cond = bson.D{{Key: field, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "number"}}}}}}
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(append(bson.D{{Key: "_id", Value: q.ID}}, cond...)).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: n}}}}))
	}
	for _, q := range qs {
		c := counts[q.ID]
		if q.CountTotal == nil {
			fill(q, "count_total", c.Total())
		}
		if q.CountTodo == nil {
			fill(q, "count_todo", c.Todo())
		}
	}
	res, err := s.queues.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return 0, fmt.Errorf("fill the counts of %d queues: %w", len(ids), err)
	}
	return res.ModifiedCount, nil
}

// FillCountsBatch is the most queues a node fills the counts of in one
// pass: the rest wait for the next passes, so that claims never wait
// behind thousands of queues inserted without counts.
const FillCountsBatch = 500

// DecrementTodo counts one task of a queue as done. It never takes
// count_todo below zero (tasks inserted without incrementing it would
// otherwise drive it negative).
func (s *Store) DecrementTodo(ctx context.Context, queueID bson.ObjectID) error {
	_, err := s.queues.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: queueID}, {Key: "count_todo", Value: bson.D{{Key: "$gt", Value: 0}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -1}}}})
	if err != nil {
		return fmt.Errorf("decrement count_todo of queue %s: %w", queueID.Hex(), err)
	}
	return nil
}

// RunningInQueue counts the claimed and running tasks of one queue on all
// nodes.
func (s *Store) RunningInQueue(ctx context.Context, queueID bson.ObjectID) (int64, error) {
	conds, err := s.statusConditions(ctx, StatusClaimed, StatusRunning)
	if err != nil {
		return 0, fmt.Errorf("count running tasks of queue %s: %w", queueID.Hex(), err)
	}
	var n int64
	for _, st := range conds {
		c, err := s.tasks.CountDocuments(ctx, bson.D{{Key: "queue", Value: queueID}, {Key: "status", Value: st}})
		if err != nil {
			return 0, fmt.Errorf("count running tasks of queue %s: %w", queueID.Hex(), err)
		}
		n += c
	}
	return n, nil
}
