package queue

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// LastEnded returns the last n tasks of a queue whose run ended, succeeded
// (1), failed (2 and up) or orphaned (-6), the newest (by _id) first:
// the sample the queue's page takes its failure rate from. Cancelled tasks
// (-5) are left out: cancelling is someone's decision, not a run's
// outcome. Only the status, node and times are read. MongoDB walks the
// queue's tasks newest first on the {queue, _id} index and stops at n;
// "the newest" was "the most recently changed" until the sort by mtime,
// which no index serves, read every ended task of the queue.
func (s *Store) LastEnded(ctx context.Context, queueID bson.ObjectID, n int64) ([]Task, error) {
	filter := bson.D{{Key: "queue", Value: queueID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusSucceeded}}}},
		bson.D{{Key: "status", Value: StatusOrphaned}},
	}}}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(n).
		SetProjection(bson.D{{Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: "node", Value: 1}, {Key: "mtime", Value: 1}, {Key: "ctime", Value: 1}})
	return s.collect(ctx, "find the last ended tasks", filter, opts)
}
