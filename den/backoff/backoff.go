// Package backoff retries an operation with exponential backoff and jitter,
// for the node's and the task runner's MongoDB writes that must land.
package backoff

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Policy says how long to wait between attempts: Initial after the first
// failure, doubling up to Max, each wait jittered by up to ±20%.
type Policy struct {
	Initial time.Duration // default 100ms
	Max     time.Duration // default 30s
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks an error that retrying cannot fix: Retry returns it at
// once.
func Permanent(err error) error { return permanent{err} }

// Retry calls op until it returns nil, a Permanent error, or ctx is done.
// After each failure it calls failed (which may be nil) with the attempt
// number, starting at 1, and the error, so callers can log the first failure
// and stay quiet after. It returns the last error.
func (p Policy) Retry(ctx context.Context, op func(context.Context) error, failed func(attempt int, err error)) error {
	wait := p.Initial
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	limit := p.Max
	if limit <= 0 {
		limit = 30 * time.Second
	}
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if failed != nil {
			failed(attempt, err)
		}
		jittered := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		t := time.NewTimer(jittered)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, limit)
	}
}
