package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

const (
	// LiveFor is how long one request of the node keeps live output going.
	// The node repeats its request every few seconds while a reader wants
	// it (den/internal/runners/live.go), so publishing stops soon after the last reader
	// leaves.
	LiveFor = 15 * time.Second
	// liveEvery is how often live output is published while it grows.
	liveEvery = time.Second
)

// publishLive writes the task's live output (queue.PublishLive) when the
// node asks for it, and then about once a second while the output grows,
// until no request has come for LiveFor. A run nobody watches publishes
// nothing. It returns a function that stops it and waits.
func (t *taskRun) publishLive(ctx context.Context) (stop func()) {
	if t.LiveRequests == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var (
			until    time.Time
			tick     *time.Ticker
			tickC    <-chan time.Time
			lastOut  = int64(-1)
			lastErr  = int64(-1)
			failures int
		)
		defer func() {
			if tick != nil {
				tick.Stop()
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.LiveRequests:
				until = time.Now().Add(LiveFor)
				if tick == nil {
					tick = time.NewTicker(liveEvery)
					tickC = tick.C
				}
			case <-tickC:
				if time.Now().After(until) {
					tick.Stop()
					tick, tickC = nil, nil
					continue
				}
			}
			out, errs, ok := t.out.live()
			if !ok {
				return
			}
			if out.End() == lastOut && errs.End() == lastErr {
				continue
			}
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			mine, err := t.store.PublishLive(pctx, t.taskID, t.Spec.Node,
				queue.Live{Token: t.info.Token, At: t.now(), Stdout: out, Stderr: errs})
			pcancel()
			switch {
			case err != nil:
				// Live output is a convenience: a failure is logged once, and
				// the next tick tries again.
				if failures++; failures == 1 {
					t.log.Warn("cannot publish live output", zap.Error(err))
				}
			case !mine:
				return // the task is no longer this run's
			default:
				if failures > 0 {
					t.log.Info("live output published again")
					failures = 0
				}
				lastOut, lastErr = out.End(), errs.End()
			}
		}
	}()
	return func() { cancel(); <-done }
}
