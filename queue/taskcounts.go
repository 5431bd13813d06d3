package queue

import (
	"context"
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file holds the counts of a queue's tasks by status and their
// summary groups.

// StatusCounts counts a queue's tasks by status. Other counts the tasks
// whose status is not a whole number.
type StatusCounts struct {
	ByStatus map[int]int64
	Other    int64
}

// Total is the number of tasks: what count_total should be.
func (c StatusCounts) Total() int64 {
	n := c.Other
	for _, v := range c.ByStatus {
		n += v
	}
	return n
}

// Todo is the number of tasks with a status of 0 or less: what count_todo
// should be. Nodes take a task off count_todo only when it finishes with a
// positive status, so cancelled (-5) and orphaned (-6) tasks stay counted.
func (c StatusCounts) Todo() int64 {
	var n int64
	for st, v := range c.ByStatus {
		if st <= 0 {
			n += v
		}
	}
	return n
}

// Group adds up the tasks of one StatusGroup.
func (c StatusCounts) Group(g string) int64 {
	var n int64
	for st, v := range c.ByStatus {
		if StatusGroup(st) == g {
			n += v
		}
	}
	return n
}

// Status groups, for summaries.
const (
	GroupTodo      = "todo"      // queued, or held back (-2, -3, -4)
	GroupRunning   = "running"   // claimed or running (-1, 0)
	GroupDone      = "done"      // succeeded (1)
	GroupFailed    = "failed"    // failed (2 and up) or orphaned (-6)
	GroupCancelled = "cancelled" // -5
)

// StatusGroup tells which summary group a status belongs to.
func StatusGroup(status int) string {
	switch {
	case status == StatusClaimed || status == StatusRunning:
		return GroupRunning
	case status == StatusSucceeded:
		return GroupDone
	case status > StatusSucceeded || status == StatusOrphaned:
		return GroupFailed
	case status == StatusCancelled:
		return GroupCancelled
	}
	return GroupTodo
}

// Finished reports whether a task with this status is no longer counted
// in its queue's count_todo (the runner took it off when it finished).
func Finished(status int) bool { return status >= StatusSucceeded }

// TaskCounts counts every queue's tasks by status (only the tasks of the
// queues in only, when it names any), in one aggregation.
//
// The grouping is on plain fields: FerretDB (the embedded development
// server) does not implement $cond inside $group.
func (s *Store) TaskCounts(ctx context.Context, only ...bson.ObjectID) (map[bson.ObjectID]StatusCounts, error) {
	var pipeline bson.A
	if len(only) > 0 {
		// The queues' tasks only, found by the {queue, status} index.
		pipeline = append(pipeline, bson.D{{Key: "$match", Value: bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: only}}}}}})
	}
	cur, err := s.tasks.Aggregate(ctx, append(pipeline,
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	))
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	defer cur.Close(ctx)
	out := map[bson.ObjectID]StatusCounts{}
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		qid, ok := id.Document().Lookup("queue").ObjectIDOK()
		if !ok {
			continue // a task without a queue id belongs to no queue
		}
		n, _ := intValue(cur.Current.Lookup("n"))
		c, ok := out[qid]
		if !ok {
			c = StatusCounts{ByStatus: map[int]int64{}}
		}
		if st, ok := intValue(id.Document().Lookup("status")); ok && st >= math.MinInt32 && st <= math.MaxInt32 {
			c.ByStatus[int(st)] += n
		} else {
			c.Other += n
		}
		out[qid] = c
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	return out, nil
}
