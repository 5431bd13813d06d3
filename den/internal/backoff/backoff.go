// Package backoff retries the node's and the task runner's MongoDB writes
// that must land: exponential backoff with jitter, on
// github.com/cenkalti/backoff/v5, with no limit but the context's and a
// callback per failure so that callers log the first failure and stay
// quiet after.
package backoff

import (
	"context"
	"errors"
	"time"

	cb "github.com/cenkalti/backoff/v5"
)

// Policy says how long to wait between attempts: Initial after the first
// failure, doubling up to Max, each wait jittered by up to ±20%.
type Policy struct {
	Initial time.Duration // default 100ms
	Max     time.Duration // default 30s
}

// Permanent marks an error that retrying cannot fix: Retry returns it at
// once.
func Permanent(err error) error { return cb.Permanent(err) }

// Retry calls op until it returns nil, a Permanent error, or ctx is done.
// After each failure it calls failed (which may be nil) with the attempt
// number, starting at 1, and the error. It returns the last error, joined
// with the context's when that ended the retries.
func (p Policy) Retry(ctx context.Context, op func(context.Context) error, failed func(attempt int, err error)) error {
	b := cb.NewExponentialBackOff()
	b.InitialInterval = p.Initial
	if b.InitialInterval <= 0 {
		b.InitialInterval = 100 * time.Millisecond
	}
	b.MaxInterval = p.Max
	if b.MaxInterval <= 0 {
		b.MaxInterval = 30 * time.Second
	}
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	attempt := 0
	var last error
	_, err := cb.Retry(ctx, func() (struct{}, error) {
		err := op(ctx)
		if err != nil {
			var perm *cb.PermanentError
			if !errors.As(err, &perm) {
				attempt++
				last = err
				if failed != nil {
					failed(attempt, err)
				}
			}
		}
		return struct{}{}, err
	}, cb.WithBackOff(b), cb.WithMaxElapsedTime(0))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(err, last) {
		return errors.Join(last, err)
	}
	return err
}
