package queue

import (
	"context"
	"fmt"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Resource-aware claiming: a task, or its queue for all its
// tasks, may carry requested_resources: {memory_mb, cpus}. A node claims
// only tasks whose request fits what it has free; a task (or queue) without
// one is claimed as Disbatch 4 claims it. A Perl Disbatch node ignores the
// field and claims such tasks whatever they request.
const (
	FieldRequested = "requested_resources"
	// The request's fields: memory in MiB, and cores (a fraction is fine).
	FieldMemoryMB = "memory_mb"
	FieldCPUs     = "cpus"
)

// Resources is an amount of memory and of cores.
type Resources struct {
	MemoryMB float64 `bson:"memory_mb,omitempty" json:"memory_mb,omitempty"`
	CPUs     float64 `bson:"cpus,omitempty" json:"cpus,omitempty"`
}

// Add returns r plus o.
func (r Resources) Add(o Resources) Resources {
	return Resources{MemoryMB: r.MemoryMB + o.MemoryMB, CPUs: r.CPUs + o.CPUs}
}

// Sub returns r minus o, none below zero.
func (r Resources) Sub(o Resources) Resources {
	return Resources{MemoryMB: max(r.MemoryMB-o.MemoryMB, 0), CPUs: max(r.CPUs-o.CPUs, 0)}
}

// Fits reports whether a request r fits in free.
func (r Resources) Fits(free Resources) bool {
	return r.MemoryMB <= free.MemoryMB && r.CPUs <= free.CPUs
}

// String is "2048 MiB, 2 cpus".
func (r Resources) String() string {
	return fmt.Sprintf("%g MiB, %g cpus", r.MemoryMB, r.CPUs)
}

// DecodeResources reads requested_resources: a document with memory_mb
// and/or cpus, each a non-negative number (or a numeric string).
func DecodeResources(v bson.RawValue) (*Resources, error) {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil, fmt.Errorf("is %s; want a document such as {memory_mb: 2048, cpus: 2}", describe(v))
	}
	var r Resources
	elems, _ := doc.Elements()
	for _, e := range elems {
		n, ok := numberValue(e.Value())
		switch {
		case e.Key() != FieldMemoryMB && e.Key() != FieldCPUs:
			return nil, fmt.Errorf("has %s; it takes only %s and %s", e.Key(), FieldMemoryMB, FieldCPUs)
		case !ok || n < 0 || math.IsInf(n, 0) || math.IsNaN(n):
			return nil, fmt.Errorf("%s is %s; want a number, 0 or more", e.Key(), describe(e.Value()))
		case e.Key() == FieldMemoryMB:
			r.MemoryMB = n
		default:
			r.CPUs = n
		}
	}
	return &r, nil
}

// numberValue reads a number, or a number written as a string.
func numberValue(v bson.RawValue) (float64, bool) {
	if f, ok := v.AsFloat64OK(); ok {
		return f, true
	}
	if s, ok := v.StringValueOK(); ok {
		var f float64
		if _, err := fmt.Sscan(strings.TrimSpace(s), &f); err == nil {
			return f, true
		}
	}
	return 0, false
}

// fitFilter is the claim's condition for a node with free resources: a
// task's own request, where it has one, must be a number that fits (a
// missing or null field matches, so tasks without a request are claimed as
// before). A request of another type (the string "500", a boolean) is not
// taken: like an odd start_after, it waits for the sweep to rewrite it as
// the number it means, or to fail the task. Residual conditions on the
// documents the index finds: the index still serves the claim.
func fitFilter(free Resources) bson.D {
	fits := func(field string, n float64) bson.D {
		return bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: field, Value: nil}},
			bson.D{{Key: field, Value: bson.D{{Key: "$lte", Value: n}}}},
		}}}
	}
	return bson.D{{Key: "$and", Value: bson.A{
		fits(FieldRequested+"."+FieldMemoryMB, free.MemoryMB),
		fits(FieldRequested+"."+FieldCPUs, free.CPUs),
	}}}
}

// FieldUnfit is den's optional, readable note on a queued task whose
// request (its own, else its queue's) is more than any live den node
// offers (resources.offer in the node documents): it would wait for ever
// with nothing saying why. Nodes set it in their sweep and remove it once
// some node offers enough or the request is lowered. A Perl node ignores
// it (and the request).
const FieldUnfit = "unfit"

// UnfitReason is the note for a request that does not fit the largest
// offer: "requests 5000 MiB, 2 cpus; the largest live den node offers
// 1000 MiB, 4 cpus". Empty when it fits.
func UnfitReason(request, largest Resources) string {
	if request.Fits(largest) {
		return ""
	}
	var parts []string
	if request.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("%g MiB", request.MemoryMB))
	}
	if request.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%g cpus", request.CPUs))
	}
	return fmt.Sprintf("requests %s; the largest live den node offers %s", strings.Join(parts, ", "), largest)
}

// Largest is the most memory and the most cores among offers (each on its
// own: one node may have the most memory, another the most cores).
func Largest(offers ...Resources) Resources {
	var l Resources
	for _, o := range offers {
		l.MemoryMB, l.CPUs = max(l.MemoryMB, o.MemoryMB), max(l.CPUs, o.CPUs)
	}
	return l
}

// UnfitCandidate is a task the sweep looks at for FieldUnfit.
type UnfitCandidate struct {
	ID     bson.ObjectID
	Queue  bson.ObjectID
	Queued bool
	// Requested is its own request (nil: none; Bad: not readable).
	Requested *Resources
	Bad       bool
	// Unfit is the note as read (empty: none).
	Unfit string
}

// UnfitQuery is what the sweep also asks for, with the same query, so
// that unfit notes cost no command of their own: tasks with a note (to
// remove or keep it), queued tasks whose own request is over Largest
// (memory or cores), and queued tasks without their own request in
// OverQueues (whose queue-level request is over Largest).
type UnfitQuery struct {
	Largest    Resources
	OverQueues []bson.ObjectID
}

// branches are the query's terms, for the $or of the sweep's query (whose
// other conditions keep it to the unfinished tasks of the served queues).
func (u *UnfitQuery) branches() bson.A {
	if u == nil {
		return nil
	}
	over := func(field string, n float64) bson.D {
		return bson.D{{Key: FieldRequested + "." + field, Value: bson.D{{Key: "$gt", Value: n}}}}
	}
	b := bson.A{
		bson.D{{Key: FieldUnfit, Value: bson.D{{Key: "$exists", Value: true}}}},
		over(FieldMemoryMB, u.Largest.MemoryMB),
		over(FieldCPUs, u.Largest.CPUs),
	}
	if len(u.OverQueues) > 0 {
		b = append(b, bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: u.OverQueues}}}, {Key: FieldRequested, Value: bson.D{{Key: "$exists", Value: false}}}})
	}
	return b
}

// UnfitCandidateOf is t as the unfit step of the sweep sees it.
func UnfitCandidateOf(t Task) UnfitCandidate {
	c := UnfitCandidate{ID: t.ID, Queue: t.Queue, Queued: t.Status == StatusQueued && (absent(t.nodeRaw) || isUnclaimed(t.nodeRaw))}
	if v := t.Raw.Lookup(FieldRequested); !absent(v) {
		r, err := DecodeResources(v)
		c.Requested, c.Bad = r, err != nil
	}
	c.Unfit, _ = t.Raw.Lookup(FieldUnfit).StringValueOK()
	return c
}

// isUnclaimed reports whether a node value is the protocol's -1.
func isUnclaimed(v bson.RawValue) bool {
	n, ok := intValue(v)
	return ok && n == Unclaimed
}

// SetUnfit writes a task's unfit note (reason empty: removes it), if the
// note is still was (empty: none) and, to write one, the task is still
// queued. It reports whether it changed it. It
// does not touch mtime: the note is den's annotation, not a change of the
// task.
func (s *Store) SetUnfit(ctx context.Context, id bson.ObjectID, was, reason string) (bool, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: FieldUnfit, Value: was}}
	if was == "" { // none, or a value that is not a note
		filter[1] = bson.E{Key: FieldUnfit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "string"}}}}}
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: FieldUnfit, Value: reason}}}}
	if reason == "" {
		update = bson.D{{Key: "$unset", Value: bson.D{{Key: FieldUnfit, Value: ""}}}}
	} else {
		// Only on a task still queued: a node may have claimed it since
		// it was read (and removed the note).
		filter = append(filter, bson.E{Key: "status", Value: StatusQueued}, bson.E{Key: "node", Value: unclaimed})
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, fmt.Errorf("note on task %s why it waits: %w", id.Hex(), err)
	}
	return res.ModifiedCount == 1, nil
}

// UnfitTasks returns up to n queued (unclaimed) tasks with an unfit note,
// oldest first, without their parameters, output and history (for den status).
func (s *Store) UnfitTasks(ctx context.Context, n int64) ([]Task, error) {
	// node and status first: the claim's index {node, status, queue, _id}
	// finds the queued tasks, and only they are looked at.
	filter := bson.D{{Key: "node", Value: unclaimed}, {Key: "status", Value: StatusQueued}, {Key: FieldUnfit, Value: bson.D{{Key: "$type", Value: "string"}}}}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(n).SetProjection(stateFields)
	return s.collect(ctx, "find tasks no node can run", filter, opts)
}
