package queue

import (
	"fmt"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Resource-aware claiming (seed 002): a task, or its queue for all its
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
// task's own request, where it has one, must fit (a missing field matches,
// so tasks without a request are claimed as before). Residual conditions
// on the documents the index finds: the index still serves the claim.
func fitFilter(free Resources) bson.D {
	notOver := func(n float64) bson.D { return bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: n}}}} }
	return bson.D{
		{Key: FieldRequested + "." + FieldMemoryMB, Value: notOver(free.MemoryMB)},
		{Key: FieldRequested + "." + FieldCPUs, Value: notOver(free.CPUs)},
	}
}
