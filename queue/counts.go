package queue

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
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

// Running counts the claimed and running tasks of the given queues, grouped
// by queue and node, in one aggregation that the {queue, status} index
// serves.
//
// The grouping is on plain fields, not expressions: FerretDB (the embedded
// development server) does not implement $cond inside $group.
func (s *Store) Running(ctx context.Context, queueIDs []bson.ObjectID) (Running, error) {
	out := Running{}
	if len(queueIDs) == 0 {
		return out, nil
	}
	cur, err := s.tasks.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{
			{Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}},
			{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}},
		}}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "node", Value: "$node"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	}, options.Aggregate().SetBatchSize(oneReply))
	if err != nil {
		return nil, fmt.Errorf("count running tasks: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var row struct {
			ID struct {
				Queue bson.ObjectID `bson:"queue"`
				Node  any           `bson:"node"`
			} `bson:"_id"`
			N int `bson:"n"`
		}
		if err := cur.Decode(&row); err != nil {
			return nil, fmt.Errorf("count running tasks: %w", err)
		}
		node, _ := row.ID.Node.(string)
		if out[row.ID.Queue] == nil {
			out[row.ID.Queue] = map[string]int{}
		}
		out[row.ID.Queue][node] += row.N
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("count running tasks: %w", err)
	}
	return out, nil
}

// FillCounts sets count_total and count_todo of a queue where they are null
// or missing, or hold something other than a number (q.BadCounts), from the
// tasks collection: count_todo counts the tasks with a status of 0 or less.
// A count someone else set meanwhile is left as is.
func (s *Store) FillCounts(ctx context.Context, q Queue) error {
	fill := func(field string, filter bson.D) error {
		n, err := s.tasks.CountDocuments(ctx, filter)
		if err != nil {
			return fmt.Errorf("count %s of queue %s: %w", field, q.ID.Hex(), err)
		}
		cond := bson.D{{Key: field, Value: nil}}
		if slices.Contains(q.BadCounts, field) {
			cond = bson.D{{Key: field, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "number"}}}}}}
		}
		_, err = s.queues.UpdateOne(ctx,
			append(bson.D{{Key: "_id", Value: q.ID}}, cond...),
			bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: n}}}})
		if err != nil {
			return fmt.Errorf("set %s of queue %s: %w", field, q.ID.Hex(), err)
		}
		return nil
	}
	if q.CountTotal == nil {
		if err := fill("count_total", bson.D{{Key: "queue", Value: q.ID}}); err != nil {
			return err
		}
	}
	if q.CountTodo == nil {
		if err := fill("count_todo", bson.D{{Key: "queue", Value: q.ID}, {Key: "status", Value: bson.D{{Key: "$lte", Value: 0}}}}); err != nil {
			return err
		}
	}
	return nil
}

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
	n, err := s.tasks.CountDocuments(ctx, bson.D{
		{Key: "queue", Value: queueID},
		{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}},
	})
	if err != nil {
		return 0, fmt.Errorf("count running tasks of queue %s: %w", queueID.Hex(), err)
	}
	return n, nil
}
