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

// ClaimFilter is the protocol's claim filter:
// {node: -1, status: -2, queue: <id>}, with node null accepted as unclaimed.
// Given several queues (of one sort order), queue is {$in: [...]}: one claim
// then serves them all, and the {node, status, queue, _id} index still
// serves it (MaxClaimQueues bounds the list so that the server can merge
// the index ranges in _id order instead of sorting). Two conditions of
// den's own follow the indexed equalities: start_after must be unset or an
// ISODate not in the future, and cancel unset or false. A start_after or
// cancel of another type (epoch seconds, a string) waits until the sweep
// has turned it into an ISODate or a boolean, or failed the task
// (NormalizeTasks): it is never run early, nor run cancelled. A task
// without those fields is claimed exactly as Disbatch 4 claims it.
func ClaimFilter(now time.Time, queueIDs ...bson.ObjectID) bson.D {
	return ClaimFilterFit(now, nil, queueIDs...)
}

// ClaimFilterFit is ClaimFilter for a node with free resources (nil: no
// condition on requested_resources; see resources.go).
func ClaimFilterFit(now time.Time, free *Resources, queueIDs ...bson.ObjectID) bson.D {
	var inQueue any = bson.D{{Key: "$in", Value: queueIDs}}
	if len(queueIDs) == 1 {
		inQueue = queueIDs[0]
	}
	f := bson.D{
		{Key: "node", Value: unclaimed},
		{Key: "status", Value: StatusQueued},
		{Key: "queue", Value: inQueue},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: FieldStartAfter, Value: nil}},
			bson.D{{Key: FieldStartAfter, Value: bson.D{{Key: "$lte", Value: now}}}},
		}},
		{Key: FieldCancel, Value: bson.D{{Key: "$in", Value: bson.A{nil, false}}}},
	}
	if free != nil {
		f = append(f, fitFilter(*free)...)
	}
	return f
}

// MaxClaimQueues is the most queues one claim names. MongoDB merges up to
// 200 index ranges in sort order (internalQueryMaxScansToExplode); the
// claim has two per queue (node -1 and null), and beyond the limit MongoDB
// would sort every queued task of those queues in memory.
const MaxClaimQueues = 50

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

// Claim claims one queued task of q for node; see ClaimAny.
func (s *Store) Claim(ctx context.Context, q Queue, node string, now time.Time) (id bson.ObjectID, ok bool, err error) {
	c, ok, err := s.ClaimAny(ctx, []bson.ObjectID{q.ID}, q.Sort, node, now)
	return c.ID, ok, err
}

// Claimed is a task a claim took: its _id, its queue, its own
// requested_resources (nil: none, or not readable) and its unfit note.
type Claimed struct {
	ID        bson.ObjectID `bson:"_id"`
	Queue     bson.ObjectID `bson:"queue"`
	Requested *Resources    `bson:"-"`
	// Unfit is the task's unfit note as it was (see resources.go): the
	// claim shows that some node can run it, so the claimer removes it.
	Unfit string `bson:"-"`
}

// ClaimAny claims one queued task of any of the given queues (at most
// MaxClaimQueues, all with the given sort order) for node, with a single
// findOneAndUpdate as the protocol requires. It returns ok false when
// those queues have nothing to claim.
func (s *Store) ClaimAny(ctx context.Context, queueIDs []bson.ObjectID, sort string, node string, now time.Time) (c Claimed, ok bool, err error) {
	return s.ClaimFit(ctx, queueIDs, sort, node, now, nil)
}

// ClaimFit is ClaimAny for a node with free resources: a task whose own
// requested_resources do not fit in free is not claimed (nil: no such
// condition).
func (s *Store) ClaimFit(ctx context.Context, queueIDs []bson.ObjectID, sort string, node string, now time.Time, free *Resources) (c Claimed, ok bool, err error) {
	if len(queueIDs) == 0 {
		return c, false, nil
	}
	// Only the _id and queue come back (a task document may be up to 16
	// MiB), where the server implements a projection on findAndModify;
	// the development server (FerretDB) does not, and gets the claim
	// without.
	claimOpts := func(project bool) *options.FindOneAndUpdateOptionsBuilder {
		opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
		if project {
			opts.SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: FieldRequested, Value: 1}, {Key: FieldUnfit, Value: 1}})
		}
		if sort := ClaimSort(sort); sort != nil {
			opts.SetSort(sort)
		}
		return opts
	}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "node", Value: node},
		{Key: "status", Value: StatusClaimed},
		{Key: "mtime", Value: now},
	}}}
	filter := ClaimFilterFit(now, free, queueIDs...)
	project := !s.noClaimProjection.Load()
	raw, err := s.tasks.FindOneAndUpdate(ctx, filter, update, claimOpts(project)).Raw()
	if project && notImplemented(err) {
		s.noClaimProjection.Store(true)
		raw, err = s.tasks.FindOneAndUpdate(ctx, filter, update, claimOpts(false)).Raw()
	}
	if err == nil {
		err = bson.Unmarshal(raw, &c)
		if v := raw.Lookup(FieldRequested); !absent(v) {
			c.Requested, _ = DecodeResources(v)
		}
		c.Unfit, _ = raw.Lookup(FieldUnfit).StringValueOK()
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("claim a task in %d queue(s) starting with %s: %w", len(queueIDs), queueIDs[0].Hex(), err)
	}
	return c, true, nil
}

// ReleaseLost puts back a task this node may have claimed at claimedAt in
// one of the given queues without hearing the reply (the claim's reply was
// lost): the claim's mtime tells it apart.
func (s *Store) ReleaseLost(ctx context.Context, queueIDs []bson.ObjectID, node string, claimedAt time.Time) (int64, error) {
	res, err := s.tasks.UpdateMany(ctx,
		bson.D{{Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}, {Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}}, {Key: "mtime", Value: claimedAt}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: Unclaimed}, {Key: "status", Value: StatusQueued}}}})
	if err != nil {
		return 0, fmt.Errorf("release a lost claim: %w", err)
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

// Probe looks, without claiming, for a claimable task in any of the given
// queues, and returns its queue. It finds tasks that writers inserted
// without raising their queue's count_todo. It is one indexed query
// however many queues it names: it has no sort, so the server need not
// merge the index ranges in order.
func (s *Store) Probe(ctx context.Context, queueIDs []bson.ObjectID, now time.Time, free *Resources) (queueID bson.ObjectID, ok bool, err error) {
	if len(queueIDs) == 0 {
		return queueID, false, nil
	}
	var doc struct {
		Queue bson.ObjectID `bson:"queue"`
	}
	err = s.tasks.FindOne(ctx, ClaimFilterFit(now, free, queueIDs...), options.FindOne().SetProjection(bson.D{{Key: "queue", Value: 1}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return queueID, false, nil
	}
	if err != nil {
		return queueID, false, fmt.Errorf("look for claimable tasks in %d queue(s): %w", len(queueIDs), err)
	}
	return doc.Queue, true, nil
}
