package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// StaleClaims returns this node's claimed tasks (-1) whose mtime is older
// than cutoff: a runner never started them. The caller rescues each (see
// Rescue): a retry when retries are left, else orphaned (-6), as the
// protocol's reaping does. mtime is an ISODate, or a number of epoch
// seconds from older writers; MongoDB compares only values of the same
// type, so each kind gets its own clause.
func (s *Store) StaleClaims(ctx context.Context, node string, cutoff time.Time) ([]Task, error) {
	return s.findTasks(ctx, bson.D{
		{Key: "node", Value: node},
		{Key: "status", Value: StatusClaimed},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "mtime", Value: bson.D{{Key: "$lt", Value: cutoff}}}},
			bson.D{{Key: "mtime", Value: bson.D{{Key: "$lt", Value: float64(cutoff.UnixNano()) / 1e9}}}},
		}},
	})
}

// ReleaseClaims puts every task claimed (-1) by node back in its queue,
// and returns how many. A node calls it when it starts: claims of its
// earlier life were never handed to a runner that still exists, or that
// runner's start fails now (it requires the claim), so each task runs
// once.
func (s *Store) ReleaseClaims(ctx context.Context, node string, now time.Time) (int64, error) {
	res, err := s.tasks.UpdateMany(ctx,
		bson.D{{Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusQueued}, {Key: "mtime", Value: now}}}})
	if err != nil {
		return 0, fmt.Errorf("release claims of an earlier run of node %s: %w", node, err)
	}
	return res.ModifiedCount, nil
}

// ClaimingNodes returns the node values (as stored: a name, or anything a
// writer put there) of all claimed and running tasks. It is an aggregation,
// not distinct: the development server refuses distinct with a time limit.
func (s *Store) ClaimingNodes(ctx context.Context) ([]bson.RawValue, error) {
	cur, err := s.tasks.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$node"}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes of running tasks: %w", err)
	}
	defer cur.Close(ctx)
	var out []bson.RawValue
	for cur.Next(ctx) {
		v := cur.Current.Lookup("_id")
		v.Value = append([]byte(nil), v.Value...)
		out = append(out, v)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list nodes of running tasks: %w", err)
	}
	return out, nil
}

// Malformed is a kind of task document that can never be claimed as it is,
// so that it would sit in its queue forever: the node fails it instead,
// with the reason in its stderr.
type Malformed struct {
	reason func(q Queue) string
	filter func(q Queue) bson.D
}

// MalformedKinds are the malformed tasks a node looks for in each queue it
// serves. Every filter starts with an equality on queue so that the
// {queue, status} index serves it.
var MalformedKinds = []Malformed{
	{
		reason: func(q Queue) string {
			return fmt.Sprintf("den: task not run: its queue field is the string %q; it must be ObjectId(%q)", q.ID.Hex(), q.ID.Hex())
		},
		filter: func(q Queue) bson.D {
			return bson.D{{Key: "queue", Value: q.ID.Hex()}, {Key: "status", Value: StatusQueued}}
		},
	},
	{
		reason: func(Queue) string {
			return "den: task not run: its status is a string; it must be the number -2 to be queued"
		},
		filter: func(q Queue) bson.D {
			return bson.D{{Key: "queue", Value: q.ID}, {Key: "status", Value: bson.D{{Key: "$type", Value: "string"}}}}
		},
	},
	{
		reason: func(Queue) string {
			return "den: task not run: it has no status; it must be the number -2 to be queued"
		},
		filter: func(q Queue) bson.D {
			return bson.D{{Key: "queue", Value: q.ID}, {Key: "status", Value: nil}}
		},
	},
}

// FailMalformed fails the tasks of queue q that match kind m, and returns
// how many it failed.
func (s *Store) FailMalformed(ctx context.Context, q Queue, m Malformed, node string, now time.Time) (int64, error) {
	reason := m.reason(q)
	res, err := s.tasks.UpdateMany(ctx, m.filter(q), bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: StatusFailed},
		{Key: "node", Value: node},
		{Key: "stdout", Value: ""},
		{Key: "stderr", Value: reason},
		{Key: "mtime", Value: now},
	}}})
	if err != nil {
		return 0, fmt.Errorf("fail malformed tasks of queue %s: %w", q.ID.Hex(), err)
	}
	return res.ModifiedCount, nil
}
