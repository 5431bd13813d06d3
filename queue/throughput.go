package queue

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// EndedSince counts, per queue and status, the tasks that finished (status
// 1 and up) with an mtime at or after since: a queue's recent throughput,
// for the status page. Nodes set mtime when a task finishes, so this is
// when it ended. Like TaskCounts it is one aggregation over the tasks
// (no index has mtime): callers should not run it more often than every
// few seconds.
//
// The grouping is on plain fields: FerretDB (the embedded development
// server) does not implement $cond inside $group.
func (s *OperatorStore) EndedSince(ctx context.Context, since time.Time) (map[bson.ObjectID]StatusCounts, error) {
	cur, err := s.tasks.Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{
			{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusSucceeded}}},
			{Key: "mtime", Value: bson.D{{Key: "$gte", Value: since}}},
		}}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks ended since %s: %w", since.Format(time.RFC3339), err)
	}
	defer cur.Close(ctx)
	out := map[bson.ObjectID]StatusCounts{}
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id").Document()
		qid, ok := id.Lookup("queue").ObjectIDOK()
		if !ok {
			continue
		}
		st, ok := intValue(id.Lookup("status"))
		if !ok || st > math.MaxInt32 {
			continue
		}
		n, _ := intValue(cur.Current.Lookup("n"))
		c, ok := out[qid]
		if !ok {
			c = StatusCounts{ByStatus: map[int]int64{}}
		}
		c.ByStatus[int(st)] += n
		out[qid] = c
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("count tasks ended since %s: %w", since.Format(time.RFC3339), err)
	}
	return out, nil
}
