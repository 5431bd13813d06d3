package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The claim and the cancellation queries match start_after as an ISODate
// and cancel as a boolean. Users also write epoch seconds, date strings, 1
// and "yes"; such tasks are found here and rewritten in the form the
// queries match, or failed with the reason when the value means nothing.

// irregular matches tasks, not finished, whose start_after or cancel is
// set to a value of another type than the queries match, or whose
// requested_resources has a value that is not a number (a number written
// as a string is rewritten; anything else fails the queued task: the
// claim takes numbers only).
// IrregularLimit is the most tasks one sweep's query returns; the next
// sweep takes the rest.
const IrregularLimit = 1000

func irregular(queueIDs []bson.ObjectID, unfit *UnfitQuery, status any) bson.D {
	terms := bson.A{
		bson.D{{Key: FieldStartAfter, Value: bson.D{{Key: "$ne", Value: nil}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}},
		bson.D{{Key: FieldCancel, Value: bson.D{{Key: "$nin", Value: bson.A{true, false, nil}}}}},
		// A request's values that are not numbers (numbers written as
		// strings among them): the claim and the sweep compare numbers
		// only.
		bson.D{{Key: FieldRequested + "." + FieldMemoryMB, Value: notNumber}},
		bson.D{{Key: FieldRequested + "." + FieldCPUs, Value: notNumber}},
		// A priority that is not a number (PriorityProblem).
		bson.D{{Key: FieldPriority, Value: notNumber}},
	}
	return bson.D{
		{Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}},
		{Key: "status", Value: status},
		{Key: "$or", Value: append(terms, unfit.branches()...)},
	}
}

// notNumber matches a field that is set (not null) to something else
// than a number.
var notNumber = bson.D{{Key: "$ne", Value: nil}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "number"}}}}

// IsIrregular reports whether t has a field the irregular query looks
// for: a start_after that is not an ISODate, a cancel that is not a
// boolean, a request with a value that is not a number.
func (t Task) IsIrregular() bool {
	if v := t.Raw.Lookup(FieldStartAfter); !absent(v) && v.Type != bson.TypeDateTime {
		return true
	}
	if v := t.Raw.Lookup(FieldCancel); !absent(v) && v.Type != bson.TypeBoolean {
		return true
	}
	for _, f := range []string{FieldMemoryMB, FieldCPUs} {
		if v := t.Raw.Lookup(FieldRequested, f); !absent(v) && !isNumber(v) {
			return true
		}
	}
	p, _, _ := PriorityProblem(t.Raw.Lookup(FieldPriority))
	return p != ""
}

func isNumber(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeDecimal128:
		return true
	}
	return false
}

// Irregular returns the unfinished tasks of the given queues whose
// start_after is not an ISODate, whose cancel is not a boolean, or whose
// requested_resources has a number written as a string (IsIrregular), and,
// with unfit, in the same query, those the unfit step of the sweep looks
// at (UnfitQuery); at most 1000, without their parameters and output.
func (s *Store) Irregular(ctx context.Context, queueIDs []bson.ObjectID, unfit *UnfitQuery) ([]Task, error) {
	if len(queueIDs) == 0 {
		return nil, nil
	}
	conds, err := s.statusConditions(ctx, StatusQueued, StatusClaimed, StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("find tasks with irregular fields: %w", err)
	}
	var out []Task
	for _, st := range conds {
		if len(out) >= IrregularLimit {
			break
		}
		cur, err := s.tasks.Find(ctx, irregular(queueIDs, unfit, st), options.Find().SetProjection(stateFields).SetLimit(int64(IrregularLimit-len(out))))
		if err != nil {
			return nil, fmt.Errorf("find tasks with irregular fields: %w", err)
		}
		for cur.Next(ctx) {
			if t, err := DecodeTask(append(bson.Raw(nil), cur.Current...)); err == nil {
				out = append(out, t)
			}
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("find tasks with irregular fields: %w", err)
		}
	}
	return out, nil
}

// Malformed returns the problems with start_after, cancel,
// requested_resources and priority of t: what makes an irregular task impossible to
// normalize (a queued one is failed with them: no claim would take it).
func (t Task) Malformed() []string {
	var out []string
	for _, p := range t.Problems {
		if strings.HasPrefix(p, FieldStartAfter+" ") || strings.HasPrefix(p, FieldCancel+" ") || strings.HasPrefix(p, FieldRequested+" ") {
			out = append(out, p)
		}
	}
	if p, _, fixable := PriorityProblem(t.Raw.Lookup(FieldPriority)); p != "" && !fixable {
		out = append(out, p)
	}
	return out
}

// Normalize rewrites the start_after and cancel of t as an ISODate and a
// boolean, and numbers of its requested_resources and its priority written
// as strings as numbers, the values they were read as, conditional on all being still
// as read. It reports whether it did.
func (s *Store) Normalize(ctx context.Context, t Task) (bool, error) {
	filter := bson.D{{Key: "_id", Value: t.ID}}
	var set bson.D
	if v := t.Raw.Lookup(FieldStartAfter); !absent(v) && v.Type != bson.TypeDateTime {
		filter = append(filter, bson.E{Key: FieldStartAfter, Value: v})
		set = append(set, bson.E{Key: FieldStartAfter, Value: t.StartAfter})
	}
	if v := t.Raw.Lookup(FieldCancel); !absent(v) && v.Type != bson.TypeBoolean {
		filter = append(filter, bson.E{Key: FieldCancel, Value: v})
		set = append(set, bson.E{Key: FieldCancel, Value: t.Cancel})
	}
	if r := t.Control.Requested; r != nil {
		for _, f := range []struct {
			name string
			n    float64
		}{{FieldMemoryMB, r.MemoryMB}, {FieldCPUs, r.CPUs}} {
			key := FieldRequested + "." + f.name
			if v := t.Raw.Lookup(FieldRequested, f.name); v.Type == bson.TypeString {
				filter = append(filter, bson.E{Key: key, Value: v})
				set = append(set, bson.E{Key: key, Value: f.n})
			}
		}
	}
	if v := t.Raw.Lookup(FieldPriority); v.Type == bson.TypeString {
		if _, n, ok := PriorityProblem(v); ok {
			filter = append(filter, bson.E{Key: FieldPriority, Value: v})
			set = append(set, bson.E{Key: FieldPriority, Value: n})
		}
	}
	if len(set) == 0 {
		return false, nil
	}
	res, err := s.tasks.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return false, fmt.Errorf("normalize task %s: %w", t.ID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// FailQueued fails (status 2) a queued task that can never run as it is,
// with the reason as its stderr, conditional on its still being queued. It
// reports whether it did; the caller counts it as done in its queue.
func (s *Store) FailQueued(ctx context.Context, t Task, node, reason string, now time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: t.ID}, {Key: "status", Value: StatusQueued}, {Key: "node", Value: unclaimed}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: StatusFailed}, {Key: "node", Value: node},
			{Key: "stdout", Value: ""}, {Key: "stderr", Value: "den: task not run: " + reason + "\n"},
			{Key: "mtime", Value: now},
		}}})
	if err != nil {
		return false, fmt.Errorf("fail task %s: %w", t.ID.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}
