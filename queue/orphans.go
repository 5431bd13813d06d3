package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StaleClaims returns, among a node's tasks (as Mine reads them), its
// claims (-1) whose mtime is older than cutoff: a runner never started
// them. The caller rescues each (see Rescue): a retry when retries are
// left, else orphaned (-6), as the protocol's reaping does. mtime is an
// ISODate, or a number of epoch seconds from older writers (DecodeTask
// reads both); a claim without one is never stale.
func StaleClaims(mine []Task, cutoff time.Time) []Task {
	var out []Task
	for _, t := range mine {
		if t.Status == StatusClaimed && !t.Mtime.IsZero() && t.Mtime.Before(cutoff) {
			out = append(out, t)
		}
	}
	return out
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
	s.forgetCandidates(res.ModifiedCount)
	return res.ModifiedCount, nil
}

// ClaimingNodes returns the node values (as stored: a name, or anything a
// writer put there) of all claimed and running tasks. It is an aggregation,
// not distinct: the development server refuses distinct with a time limit.
func (s *Store) ClaimingNodes(ctx context.Context) ([]bson.RawValue, error) {
	conds, err := s.statusConditions(ctx, StatusClaimed, StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("list nodes of running tasks: %w", err)
	}
	var out []bson.RawValue
	for _, st := range conds {
		cur, err := s.tasks.Aggregate(ctx, bson.A{
			bson.D{{Key: "$match", Value: bson.D{{Key: "status", Value: st}}}},
			bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$node"}}}},
		}, options.Aggregate().SetBatchSize(oneReply))
		if err != nil {
			return nil, fmt.Errorf("list nodes of running tasks: %w", err)
		}
		for cur.Next(ctx) {
			v := cur.Current.Lookup("_id")
			v.Value = append([]byte(nil), v.Value...)
			if !slices.ContainsFunc(out, v.Equal) {
				out = append(out, v)
			}
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("list nodes of running tasks: %w", err)
		}
	}
	return out, nil
}

// MalformedTask is a task document that can never be claimed as it is,
// so that it would sit in its queue forever: the node fails it instead,
// with the reason in its stderr.
type MalformedTask struct {
	ID     bson.ObjectID
	Queue  bson.ObjectID
	Reason string
	// match is the task's queue and status as read: the fail is
	// conditional on them.
	match bson.D
}

// Malformed finds, in one query, the malformed tasks of the given queues:
// a queue field that is the queue's _id as a string, and a status that is
// a string or missing. Each branch starts with the queue so that the
// {queue, status} index serves it. At most 1000 are returned a time.
func (s *Store) Malformed(ctx context.Context, queueIDs []bson.ObjectID) ([]MalformedTask, error) {
	if len(queueIDs) == 0 {
		return nil, nil
	}
	hexes := make([]string, len(queueIDs))
	for i, id := range queueIDs {
		hexes[i] = id.Hex()
	}
	in := func(v any) bson.D { return bson.D{{Key: "$in", Value: v}} }
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "queue", Value: in(hexes)}, {Key: "status", Value: StatusQueued}},
		bson.D{{Key: "queue", Value: in(queueIDs)}, {Key: "status", Value: bson.D{{Key: "$type", Value: "string"}}}},
		bson.D{{Key: "queue", Value: in(queueIDs)}, {Key: "status", Value: nil}},
	}}}
	cur, err := s.tasks.Find(ctx, filter, options.Find().
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "status", Value: 1}}).SetLimit(1000))
	if err != nil {
		return nil, fmt.Errorf("find malformed tasks: %w", err)
	}
	defer cur.Close(ctx)
	var out []MalformedTask
	for cur.Next(ctx) {
		raw := cur.Current
		id, ok := raw.Lookup("_id").ObjectIDOK()
		if !ok {
			continue // nothing can be done to it by _id
		}
		m := MalformedTask{ID: id, match: bson.D{{Key: "_id", Value: id}}}
		qv, st := raw.Lookup("queue"), raw.Lookup("status")
		if hex, isString := qv.StringValueOK(); isString {
			qid, err := bson.ObjectIDFromHex(hex)
			if err != nil {
				continue
			}
			m.Queue = qid
			m.Reason = fmt.Sprintf("den: task not run: its queue field is the string %q; it must be ObjectId(%q)", hex, hex)
			m.match = append(m.match, bson.E{Key: "queue", Value: hex}, bson.E{Key: "status", Value: StatusQueued})
		} else {
			m.Queue, _ = qv.ObjectIDOK()
			m.match = append(m.match, bson.E{Key: "queue", Value: m.Queue})
			if s, isString := st.StringValueOK(); isString {
				m.Reason = "den: task not run: its status is a string; it must be the number -2 to be queued"
				m.match = append(m.match, bson.E{Key: "status", Value: s})
			} else {
				m.Reason = "den: task not run: it has no status; it must be the number -2 to be queued"
				m.match = append(m.match, bson.E{Key: "status", Value: nil})
			}
		}
		out = append(out, m)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("find malformed tasks: %w", err)
	}
	return out, nil
}

// FailMalformed fails a malformed task, if it is still as it was read, and
// reports whether it did.
func (s *Store) FailMalformed(ctx context.Context, m MalformedTask, node string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx, m.match, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: StatusFailed},
		{Key: "node", Value: node},
		{Key: "stdout", Value: ""},
		{Key: "stderr", Value: m.Reason},
		{Key: "mtime", Value: now},
		{Key: FieldOutcome, Value: OutcomeMalformed},
		{Key: FieldOutcomeReason, Value: strings.TrimSpace(m.Reason)},
	}}})
	if err != nil {
		return false, fmt.Errorf("fail malformed task %s: %w", m.ID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}
