package queue

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file holds count drift: a queue's stored counts compared with its
// tasks, and fixed on condition that they did not move meanwhile.

// CountDrift is a queue whose stored counts differ from its tasks.
type CountDrift struct {
	Queue Queue
	// Stored values as read (nil: missing, null or not a number).
	StoredTodo, StoredTotal *int64
	// What the tasks say.
	Todo, Total int64
}

// Drifted reports whether the stored counts differ from the tasks'.
func (d CountDrift) Drifted() bool {
	return d.StoredTodo == nil || d.StoredTotal == nil || *d.StoredTodo != d.Todo || *d.StoredTotal != d.Total
}

// CheckCounts compares every usable queue's count_todo and count_total
// with its tasks (one aggregation over the tasks), and returns one entry
// per queue.
func (s *Store) CheckCounts(ctx context.Context) ([]CountDrift, error) {
	queues, _, err := s.Queues(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := s.TaskCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CountDrift, 0, len(queues))
	for _, q := range queues {
		c := counts[q.ID]
		out = append(out, CountDrift{Queue: q, StoredTodo: q.CountTodo, StoredTotal: q.CountTotal, Todo: c.Todo(), Total: c.Total()})
	}
	return out, nil
}

// FixCounts writes the counts the tasks gave into a drifted queue, on
// condition that the stored counts are still those read: a node or writer
// that moved them meanwhile (a task finished, tasks were added) makes the
// fix change nothing (false), and the check should be run again.
func (s *Store) FixCounts(ctx context.Context, d CountDrift) (bool, error) {
	filter := bson.D{{Key: "_id", Value: d.Queue.ID}}
	for _, c := range []struct {
		field string
		raw   bson.RawValue
	}{{"count_todo", d.Queue.Raw.Lookup("count_todo")}, {"count_total", d.Queue.Raw.Lookup("count_total")}} {
		if c.raw.Type == 0 {
			filter = append(filter, bson.E{Key: c.field, Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			filter = append(filter, bson.E{Key: c.field, Value: c.raw})
		}
	}
	res, err := s.queues.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: d.Todo}, {Key: "count_total", Value: d.Total}}}})
	if err != nil {
		return false, fmt.Errorf("fix counts of queue %s: %w", d.Queue.ID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}
