package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// unclaimed matches a task nobody has claimed: node -1 as the protocol
// writes it, or null/missing as some writers leave it.
var unclaimed = bson.D{{Key: "$in", Value: bson.A{Unclaimed, nil}}}

// ClaimFilter is the protocol's claim filter for one queue:
// {node: -1, status: -2, queue: <id>}, with node null accepted as unclaimed.
// Two conditions of den's own follow the indexed equalities, so the claim
// still uses the {node, status, queue, _id} index: start_after must be
// unset or an ISODate not in the future, and cancel unset or false. A
// start_after or cancel of another type (epoch seconds, a string) waits
// until the sweep has turned it into an ISODate or a boolean, or failed
// the task (NormalizeTasks): it is never run early, nor run cancelled. A
// task without those fields is claimed exactly as Disbatch 4 claims it.
func ClaimFilter(queueID bson.ObjectID, now time.Time) bson.D {
	return bson.D{
		{Key: "node", Value: unclaimed},
		{Key: "status", Value: StatusQueued},
		{Key: "queue", Value: queueID},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: FieldStartAfter, Value: nil}},
			bson.D{{Key: FieldStartAfter, Value: bson.D{{Key: "$lte", Value: now}}}},
		}},
		{Key: FieldCancel, Value: bson.D{{Key: "$in", Value: bson.A{nil, false}}}},
	}
}

// ClaimSort is the claim's sort for a queue's sort setting: on _id, oldest
// first for fifo, newest first for lifo, and none (the server's order) for
// default.
func ClaimSort(sort string) bson.D {
	switch sort {
	case SortFIFO:
		return bson.D{{Key: "_id", Value: 1}}
	case SortLIFO:
		return bson.D{{Key: "_id", Value: -1}}
	}
	return nil
}

// Claim claims one queued task of q for node with a single findOneAndUpdate,
// as the protocol requires, and returns its _id. It returns ok false when the
// queue has nothing to claim.
func (s *Store) Claim(ctx context.Context, q Queue, node string, now time.Time) (id bson.ObjectID, ok bool, err error) {
	// Only the _id comes back (a task document may be up to 16 MiB), where
	// the server implements a projection on findAndModify; the
	// development server (FerretDB) does not, and gets the claim without.
	claimOpts := func(project bool) *options.FindOneAndUpdateOptionsBuilder {
		opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
		if project {
			opts.SetProjection(bson.D{{Key: "_id", Value: 1}})
		}
		if sort := ClaimSort(q.Sort); sort != nil {
			opts.SetSort(sort)
		}
		return opts
	}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "node", Value: node},
		{Key: "status", Value: StatusClaimed},
		{Key: "mtime", Value: now},
	}}}
	var doc struct {
		ID bson.ObjectID `bson:"_id"`
	}
	project := !s.noClaimProjection.Load()
	err = s.tasks.FindOneAndUpdate(ctx, ClaimFilter(q.ID, now), update, claimOpts(project)).Decode(&doc)
	if project && notImplemented(err) {
		s.noClaimProjection.Store(true)
		err = s.tasks.FindOneAndUpdate(ctx, ClaimFilter(q.ID, now), update, claimOpts(false)).Decode(&doc)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("claim task in queue %s: %w", q.ID.Hex(), err)
	}
	return doc.ID, true, nil
}

// ReleaseLost puts back a task this node may have claimed at claimedAt
// without hearing the reply (the claim's reply was lost): the claim's mtime
// tells it apart.
func (s *Store) ReleaseLost(ctx context.Context, q Queue, node string, claimedAt time.Time) (int64, error) {
	res, err := s.tasks.UpdateMany(ctx,
		bson.D{{Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}, {Key: "queue", Value: q.ID}, {Key: "mtime", Value: claimedAt}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusQueued}}}})
	if err != nil {
		return 0, fmt.Errorf("release lost claim in queue %s: %w", q.ID.Hex(), err)
	}
	return res.ModifiedCount, nil
}

// Release puts a task this node claimed but never started back in its queue
// (status -2, node -1). It does nothing if the task is no longer claimed by
// node, and reports whether it released it.
func (s *Store) Release(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "node", Value: Unclaimed},
			{Key: "status", Value: StatusQueued},
			{Key: "mtime", Value: now},
		}}})
	if err != nil {
		return false, fmt.Errorf("release task %s: %w", taskID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// notImplemented reports whether the server refused a command option it
// does not implement (code 238, NotImplemented): the server refused the
// whole command, so nothing was written.
func notImplemented(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(238)
}
