package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Task priorities (den's own; a Disbatch 4 node ignores them).
//
// A task's priority is an integer, default 0 (missing or null), and may be
// negative: a den node claims the highest first, and within one priority in
// its queue's order (fifo, lifo, or the server's). MongoDB sorts a missing
// field as null, below every number, so one descending sort on priority
// would take a task of priority -1 before a task without one. The claim of
// a queue with priorities is therefore made in three steps, each one
// findOneAndUpdate with the whole claim filter, the next made only when the
// one before took nothing (claimByPriority):
//
//  1. priority above 0, sorted on priority (highest first), then the
//     queue's _id order;
//  2. no number but 0 (missing, null, 0, and what the sweep has not yet
//     turned into a number or failed: see PriorityProblem), in the queue's
//     order, exactly as the protocol's claim;
//  3. priority below 0, sorted as the first.
//
// A queue none of whose queued tasks has a priority field costs one
// command a claim, the protocol's claim, as before: a node learns which
// queues have queued tasks with a priority with one query a full pass that
// claims (QueuesWithPriority), not one a task.

// FieldPriority is a task's priority.
const FieldPriority = "priority"

// QueuesWithPriority returns which of the given queues have a queued task with a
// priority field (of any value), in one aggregation. The priority index
// (Indexes) holds exactly those tasks on MongoDB; the development server
// scans.
func (p *Store) QueuesWithPriority(ctx context.Context, queueIDs []bson.ObjectID) (map[bson.ObjectID]bool, error) {
	out := map[bson.ObjectID]bool{}
	if len(queueIDs) == 0 {
		return out, nil
	}
	cur, err := p.tasks.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{
			{Key: "status", Value: StatusQueued},
			{Key: FieldPriority, Value: bson.D{{Key: "$exists", Value: true}}},
			{Key: "queue", Value: bson.D{{Key: "$in", Value: queueIDs}}},
		}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$queue"}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("find the queues with task priorities among %d: %w", len(queueIDs), err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if id, ok := cur.Current.Lookup("_id").ObjectIDOK(); ok {
			out[id] = true
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("find the queues with task priorities among %d: %w", len(queueIDs), err)
	}
	return out, nil
}

// priorityTiers are the claim's three steps: the condition on priority each
// adds to the claim filter, and whether it sorts on priority first.
var priorityTiers = []struct {
	cond   bson.E
	byPrio bool
}{
	{bson.E{Key: FieldPriority, Value: bson.D{{Key: "$gt", Value: 0}}}, true},
	{bson.E{Key: "$nor", Value: bson.A{
		bson.D{{Key: FieldPriority, Value: bson.D{{Key: "$gt", Value: 0}}}},
		bson.D{{Key: FieldPriority, Value: bson.D{{Key: "$lt", Value: 0}}}},
	}}, false},
	{bson.E{Key: FieldPriority, Value: bson.D{{Key: "$lt", Value: 0}}}, true},
}

// PrioritySort is the sort of a claim step that sorts on priority: the
// highest first, then the queue's order (sort, as ClaimSort).
func PrioritySort(sort string) bson.D {
	return append(bson.D{{Key: FieldPriority, Value: -1}}, ClaimSort(sort)...)
}

// claimByPriority claims one task of r, the highest priority first
// (above). claim runs one findOneAndUpdate with a filter and a sort (nil:
// none).
func claimByPriority(r ClaimRequest, claim func(filter, sort bson.D) (bson.Raw, error)) (bson.Raw, error) {
	for _, tier := range priorityTiers {
		sort := ClaimSort(r.Sort)
		if tier.byPrio {
			sort = PrioritySort(r.Sort)
		}
		raw, err := claim(append(ClaimFilter(r.At, r.Free, r.Queues...), tier.cond), sort)
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return raw, err
		}
	}
	return nil, mongo.ErrNoDocuments
}

// PriorityOf reads a task's priority as the claim orders it: 0 when it
// has none, or one that is not a number.
func PriorityOf(v bson.RawValue) float64 {
	if f, ok := numberOf(v); ok && !math.IsNaN(f) {
		return f
	}
	return 0
}

func numberOf(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	case bson.TypeDecimal128:
		f, err := strconv.ParseFloat(v.Decimal128().String(), 64)
		return f, err == nil
	}
	return 0, false
}

// PriorityProblem says what is wrong with a task's priority field (v), ""
// when nothing is: unset, null, or a number of any numeric type (an
// integer, as den writes it; a fraction or a number past the int64 range
// orders by its value, as MongoDB compares numbers, and NaN as 0). A
// string holding a number is a problem the sweep fixes: it rewrites it as
// that number (fixed, ok). Anything else (another string, a boolean, a
// date, an object) cannot be fixed: the sweep fails the queued task with
// the problem as its reason. Until the sweep has dealt with it, a claim
// orders such a task as priority 0.
func PriorityProblem(v bson.RawValue) (problem string, fixed any, ok bool) {
	if absent(v) {
		return "", nil, false
	}
	if _, isNum := numberOf(v); isNum {
		return "", nil, false
	}
	if v.Type == bson.TypeString {
		str := strings.TrimSpace(v.StringValue())
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			return fmt.Sprintf("%s is the string %q; den rewrites it as the number", FieldPriority, v.StringValue()), n, true
		}
		if f, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return fmt.Sprintf("%s is the string %q; den rewrites it as the number", FieldPriority, v.StringValue()), f, true
		}
	}
	return fmt.Sprintf("%s is %s; it must be an integer, default 0 (a higher one runs first)", FieldPriority, describe(v)), nil, false
}

// higherPriority is the condition on priority of the tasks a claim takes
// before a task of priority p (as PriorityOf reads it): those with more,
// a task without a number counting as 0.
func higherPriority(p float64) bson.E {
	if p >= 0 {
		return bson.E{Key: FieldPriority, Value: bson.D{{Key: "$gt", Value: p}}}
	}
	return bson.E{Key: FieldPriority, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$lte", Value: p}}}}}
}

// samePriority is the condition on priority of the tasks of priority p.
func samePriority(p float64) bson.E {
	if p == 0 {
		return priorityTiers[1].cond
	}
	return bson.E{Key: FieldPriority, Value: p}
}

// PriorityText is a task's priority field (v) as people read it: "" when
// it has none (the default, 0), the number, or a short description of a
// value that is not one.
func PriorityText(v bson.RawValue) string {
	if absent(v) {
		return ""
	}
	switch v.Type {
	case bson.TypeInt32, bson.TypeInt64:
		n, _ := v.AsInt64OK()
		return strconv.FormatInt(n, 10)
	case bson.TypeDouble:
		return strconv.FormatFloat(v.Double(), 'f', -1, 64)
	case bson.TypeDecimal128:
		return v.Decimal128().String()
	}
	return describe(v)
}
