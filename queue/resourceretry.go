package queue

import (
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Resource retries: a run stopped for using more memory than
// its task requested (den's own enforcement of requested_resources
// .memory_mb, or the kernel's OOM killer inside the run's cgroup) is
// retried, when it has retries left (max_retries, as any failure), with
// more memory requested: the request times memory_retry_factor, at most
// what the largest live den node offers (its resources.offer). Each
// attempt's request is kept in its history entry beside what it used, so
// the request that finally worked is the task's requested_resources once
// it succeeded.
const (
	// FieldMemoryRetryFactor multiplies a task's memory request after a
	// run stopped for passing it (task, else queue; more than 1).
	FieldMemoryRetryFactor = "memory_retry_factor"
	// DefaultMemoryRetryFactor is Jobmon's default memory scale (+50 %).
	DefaultMemoryRetryFactor = 1.5
	// maxMemoryRetryFactor bounds the factor: a typo must not ask for
	// a thousand times the memory.
	maxMemoryRetryFactor = 100
)

// NextMemoryRequest is the request of the retry of a run stopped for
// passing its memory request: old's memory times factor, rounded up to a
// whole MiB, and at most largest (the most any live den node offers; 0:
// none known, no cap). ok is false, with why, when that is no more than
// old: no node offers more, so a retry would be stopped again.
func NextMemoryRequest(old Resources, factor, largest float64) (next Resources, ok bool, why string) {
	if factor <= 1 {
		factor = DefaultMemoryRetryFactor
	}
	next = old
	next.MemoryMB = math.Ceil(old.MemoryMB * factor)
	if largest > 0 && next.MemoryMB > largest {
		next.MemoryMB = largest
	}
	if next.MemoryMB <= old.MemoryMB {
		return old, false, fmt.Sprintf("it needs more than %g MiB and no live den node offers more (the largest offers %g MiB)", old.MemoryMB, largest)
	}
	return next, true, ""
}

// DecodeMemoryRetryFactor reads memory_retry_factor: a number (or a
// numeric string) more than 1, at most 100.
func DecodeMemoryRetryFactor(v bson.RawValue) (float64, error) {
	f, ok := numberValue(v)
	if !ok || math.IsNaN(f) || f <= 1 || f > maxMemoryRetryFactor {
		return 0, fmt.Errorf("is %s; want a number more than 1 and at most %d, such as 1.5", describe(v), maxMemoryRetryFactor)
	}
	return f, nil
}
