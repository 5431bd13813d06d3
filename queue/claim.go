package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// without those fields is claimed exactly as Disbatch 4 claims it. With
// free (nil: no condition), a task whose own requested_resources do not
// fit in free is not claimed (Resources.Fits).
func ClaimFilter(now time.Time, free *Resources, queueIDs ...bson.ObjectID) bson.D {
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

// ClaimRequest is what one claim asks for.
type ClaimRequest struct {
	// Queues are the queues to claim from: at most MaxClaimQueues, all of
	// sort order Sort.
	Queues []bson.ObjectID
	Sort   string
	// Node is the claiming node's name; At the claim's time, written as
	// the task's mtime (so that a claim whose reply was lost can be
	// recognised: ReleaseLost).
	Node string
	At   time.Time
	// Free, when set, is what the node has free for tasks' own
	// requested_resources: a task that requests more is not claimed.
	Free *Resources
	// Priorities, set when some of Queues have queued tasks with a
	// priority (Priorities.Queues), claims the highest priority first
	// (claimByPriority), across the queues named, at up to three commands
	// a claim; unset, the claim is the protocol's, one command.
	Priorities bool
}

// Claimed is a task a claim took: its _id, its queue, its own
// requested_resources (nil: none, or not readable) and its unfit note.
// When the document the claim took cannot be a task, Malformed says why,
// and the other fields are zero.
type Claimed struct {
	ID        bson.ObjectID
	Queue     bson.ObjectID
	Requested *Resources
	// Unfit is the task's unfit note as it was (FieldUnfit): the
	// claim shows that some node can run it, so the claimer removes it.
	Unfit     string
	Malformed *MalformedClaim
}

// MalformedClaim is a document a claim took that cannot be run as a task:
// its _id is not an ObjectId, or its queue is not one ObjectId (an array
// holding the queue's id matches the claim as the id itself does). The
// claim has already taken it out of every claim's way (status -1, node
// the claimer); FailClaimed fails it for good with the reason.
type MalformedClaim struct {
	// ID is the document's _id as stored, of whatever type.
	ID bson.RawValue
	// Queue is the claimed queue it was counted in (zero: none).
	Queue  bson.ObjectID
	Reason string
}

// Claim claims one queued task of the requested queues, with a single
// findOneAndUpdate as the protocol requires. It returns ok false when those
// queues have nothing to claim. A document that the claim takes but that
// cannot be a task comes back with Claimed.Malformed set: the caller fails
// it (FailClaimed) and claims again.
func (s *Store) Claim(ctx context.Context, r ClaimRequest) (c Claimed, ok bool, err error) {
	if len(r.Queues) == 0 {
		return c, false, nil
	}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "node", Value: r.Node},
		{Key: "status", Value: StatusClaimed},
		{Key: "mtime", Value: r.At},
	}}}
	// Only the _id and queue come back (a task document may be up to 16
	// MiB), where the server implements a projection on findAndModify;
	// the development server (FerretDB) does not, and gets the claim
	// without.
	claimSorted := func(filter, sort bson.D) (bson.Raw, error) {
		opts := func(project bool) *options.FindOneAndUpdateOptionsBuilder {
			opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
			if project {
				opts.SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: FieldRequested, Value: 1}, {Key: FieldUnfit, Value: 1}})
			}
			if sort != nil {
				opts.SetSort(sort)
			}
			return opts
		}
		project := !s.noClaimProjection.Load()
		raw, err := s.tasks.FindOneAndUpdate(ctx, filter, update, opts(project)).Raw()
		if project && notImplemented(err) {
			s.noClaimProjection.Store(true)
			raw, err = s.tasks.FindOneAndUpdate(ctx, filter, update, opts(false)).Raw()
		}
		return raw, err
	}
	claim := func(filter bson.D, sorted bool) (bson.Raw, error) {
		if sorted {
			return claimSorted(filter, ClaimSort(r.Sort))
		}
		return claimSorted(filter, nil)
	}
	var raw bson.Raw
	byCandidates, err := s.claimsByCandidates(ctx)
	if err != nil {
		return c, false, fmt.Errorf("claim a task in %d queue(s) starting with %s: %w", len(r.Queues), r.Queues[0].Hex(), err)
	}
	switch {
	case r.Priorities:
		raw, err = claimByPriority(r, claimSorted)
	case byCandidates && ClaimSort(r.Sort) != nil:
		raw, err = s.claimCandidate(ctx, r, claim)
	default:
		raw, err = claim(ClaimFilter(r.At, r.Free, r.Queues...), true)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("claim a task in %d queue(s) starting with %s: %w", len(r.Queues), r.Queues[0].Hex(), err)
	}
	return decodeClaimed(raw, r.Queues), true, nil
}

// decodeClaimed reads what a claim returned, which was matched by a claim
// of queues but may be any document.
func decodeClaimed(raw bson.Raw, queues []bson.ObjectID) Claimed {
	var c Claimed
	idv, qv := raw.Lookup("_id"), raw.Lookup("queue")
	id, idOK := idv.ObjectIDOK()
	q, qOK := qv.ObjectIDOK()
	if idOK && qOK && slices.Contains(queues, q) {
		c.ID, c.Queue = id, q
		if v := raw.Lookup(FieldRequested); !absent(v) {
			c.Requested, _ = DecodeResources(v)
		}
		c.Unfit, _ = raw.Lookup(FieldUnfit).StringValueOK()
		return c
	}
	m := &MalformedClaim{ID: bson.RawValue{Type: idv.Type, Value: slices.Clone(idv.Value)}}
	switch {
	case qOK && slices.Contains(queues, q):
		m.Queue = q
	case qv.Type == bson.TypeArray:
		vals, _ := qv.Array().Values()
		for _, v := range vals {
			if id, ok := v.ObjectIDOK(); ok && slices.Contains(queues, id) {
				m.Queue = id
				break
			}
		}
	}
	switch {
	case !idOK:
		m.Reason = fmt.Sprintf("its _id is %s; den runs only tasks whose _id is an ObjectId, as the drivers and the mongo shell make it", describe(idv))
	case qv.Type == bson.TypeArray:
		m.Reason = fmt.Sprintf("its queue is %s; it must be the ObjectId of one queue", describe(qv))
	default:
		m.Reason = fmt.Sprintf("its queue is %s; it must be the ObjectId of one queue", describe(qv))
	}
	c.Malformed = m
	return c
}

// FailClaimed fails (2) a document a claim of node took that cannot be a
// task, with the reason in its stderr, if it is still so claimed, and
// reports whether it did. The caller counts it as done in its queue
// (m.Queue). A document so large that the reason does not fit in it is
// failed without it: it is then given only its status, which a claim never
// matches again.
func (s *Store) FailClaimed(ctx context.Context, m MalformedClaim, node string, now time.Time) (bool, error) {
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: m.ID}}}, {Key: "node", Value: node}, {Key: "status", Value: StatusClaimed}}
	reason := "den: task not run: " + m.Reason + "\n"
	res, err := s.tasks.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: StatusFailed},
		{Key: "stdout", Value: ""},
		{Key: "stderr", Value: reason},
		{Key: "mtime", Value: now},
		{Key: FieldOutcome, Value: OutcomeMalformed},
		{Key: FieldOutcomeReason, Value: m.Reason},
	}}})
	var se mongo.ServerError
	if err != nil && errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		// The server refused the update itself (a document at the size
		// limit cannot take the reason): the status alone is as large as
		// it was.
		res, err = s.tasks.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: StatusFailed}}}})
	}
	if err != nil {
		return false, fmt.Errorf("fail the claimed document with _id %s: %w", m.ID, err)
	}
	return res.ModifiedCount == 1, nil
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
	s.forgetCandidates(res.ModifiedCount)
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
	s.forgetCandidates(res.ModifiedCount)
	return res.ModifiedCount == 1, nil
}

// notImplemented reports whether the server refused a command option it
// does not implement (code 238, NotImplemented): the server refused the
// whole command, so nothing was written.
func notImplemented(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(238)
}

// ProbeRequest says where a probe (NodeStore.Probe) looks for a claimable
// task: in the queues In names, or, when In is nil, in every queue but
// those NotIn names. At and Free are a claim's (ClaimRequest).
type ProbeRequest struct {
	In, NotIn []bson.ObjectID
	At        time.Time
	Free      *Resources
}

// ProbeFilter is the probe's filter: the claim's (ClaimFilter), with its
// queue condition r's: queue one of r.In, or, when r.In is nil, an
// ObjectId none of r.NotIn. MongoDB answers the second from the
// {node, status, queue} index, skipping the queues NotIn names: it reads
// the queued tasks of the other queues only.
func ProbeFilter(r ProbeRequest) bson.D {
	if r.In != nil {
		return ClaimFilter(r.At, r.Free, r.In...)
	}
	f := ClaimFilter(r.At, r.Free)
	for i := range f {
		if f[i].Key == "queue" {
			cond := bson.D{{Key: "$type", Value: "objectId"}}
			if len(r.NotIn) > 0 {
				cond = append(bson.D{{Key: "$nin", Value: r.NotIn}}, cond...)
			}
			f[i].Value = cond
		}
	}
	return f
}

// Probe looks, without claiming, for a claimable task where r says, and
// returns its queue. It finds tasks that writers inserted without raising
// their queue's count_todo, in queues the caller knows and in queues it
// does not know yet (with NotIn). It is one indexed query however many
// queues it names: it has no sort, so the server need not merge the index
// ranges in order.
func (s *Store) Probe(ctx context.Context, r ProbeRequest) (queueID bson.ObjectID, ok bool, err error) {
	if r.In != nil && len(r.In) == 0 {
		return queueID, false, nil
	}
	raw, err := s.tasks.FindOne(ctx, ProbeFilter(r), options.FindOne().SetProjection(bson.D{{Key: "queue", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return queueID, false, nil
	}
	if err != nil {
		if r.In != nil {
			return queueID, false, fmt.Errorf("look for claimable tasks in %d queue(s): %w", len(r.In), err)
		}
		return queueID, false, fmt.Errorf("look for claimable tasks outside %d queue(s): %w", len(r.NotIn), err)
	}
	if r.In == nil {
		// Any queue but NotIn's: an ObjectId, or an array holding one
		// (which a claim there takes and fails as malformed).
		return probedQueue(raw.Lookup("queue"), r.NotIn)
	}
	// What the claim filter matched may hold the queue's id in an array:
	// the queue it names is the one a claim then meets it in.
	c := decodeClaimed(raw, r.In)
	switch {
	case c.Malformed == nil:
		return c.Queue, true, nil
	case !c.Malformed.Queue.IsZero():
		return c.Malformed.Queue, true, nil
	}
	return r.In[0], true, nil
}

// probedQueue is the queue a probe outside notIn found a task in: its
// queue field, or the first ObjectId of it that notIn does not name.
func probedQueue(v bson.RawValue, notIn []bson.ObjectID) (bson.ObjectID, bool, error) {
	if id, ok := v.ObjectIDOK(); ok {
		return id, true, nil
	}
	if arr, ok := v.ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, e := range vals {
			if id, ok := e.ObjectIDOK(); ok && !slices.Contains(notIn, id) {
				return id, true, nil
			}
		}
	}
	return bson.ObjectID{}, false, nil
}
