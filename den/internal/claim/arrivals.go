package claim

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/backoff"
	"github.com/den-project/den/queue"
)

// This file lets a free slot take a new task as soon as it is inserted,
// instead of at the next pass (up to one interval later). Where the server
// has change streams (a replica set or a sharded cluster), the node
// watches task inserts; each arrival makes its queue claimable and wakes
// the loop for a short pass that only claims. Everywhere else (a
// standalone server, the development server) the node polls: the queues
// it reads every pass tell of new work by their counts, and a probe every
// ProbeEvery finds tasks inserted without them.

// ArrivalSource tells a node of new queued tasks as they are inserted.
// Watch calls arrived with each new task's queue until ctx is done (it
// then returns nil) or it fails. A failure that is a server's refusal
// (mongo.ServerError: no change streams here) ends watching for good;
// others are retried with backoff.
type ArrivalSource interface {
	Watch(ctx context.Context, arrived func(queueID bson.ObjectID)) error
}

// changeStream is the default ArrivalSource: a change stream on tasks.
type changeStream struct{ store queue.NodeStore }

func (c changeStream) Watch(ctx context.Context, arrived func(bson.ObjectID)) error {
	stream, err := c.store.WatchArrivals(ctx)
	if err != nil {
		return err
	}
	defer stream.Close(context.WithoutCancel(ctx))
	for {
		q, err := stream.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		arrived(q)
	}
}

// arrivals collects the queues new tasks arrived in since the last claim.
type arrivals struct {
	mu     sync.Mutex
	queues map[bson.ObjectID]bool
}

func (a *arrivals) add(q bson.ObjectID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queues == nil {
		a.queues = map[bson.ObjectID]bool{}
	}
	a.queues[q] = true
}

func (a *arrivals) take() map[bson.ObjectID]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues
	a.queues = nil
	return q
}

// workIn makes queue q claimable at once and wakes the claims: a task was
// put back in it (a rescue's retry) that no count tells of.
func (cl *Claimer) WorkIn(q bson.ObjectID) {
	cl.arrived.add(q)
	cl.WakeUp()
}

// watchArrivals runs the node's ArrivalSource until ctx is done, and
// returns a func that waits for it to end.
func (cl *Claimer) WatchArrivals(ctx context.Context) (wait func()) {
	src := cl.params.Arrivals
	if src == nil {
		src = changeStream{cl.Store}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var failing atomic.Bool
		err := backoff.Policy{Initial: time.Second, Max: time.Minute}.Retry(ctx, func(ctx context.Context) error {
			err := src.Watch(ctx, func(q bson.ObjectID) {
				if failing.CompareAndSwap(true, false) {
					cl.Log.Info("watching task inserts again")
				}
				cl.arrived.add(q)
				cl.WakeUp()
			})
			var refused mongo.ServerError
			if errors.As(err, &refused) {
				return backoff.Permanent(err)
			}
			return err
		}, func(attempt int, err error) {
			if failing.CompareAndSwap(false, true) {
				cl.Log.Warn("watching task inserts failed; new tasks are seen by polling until it works again", zap.Error(err))
			}
		})
		if err != nil && ctx.Err() == nil {
			cl.Log.Info("no change streams on this server (a replica set has them): new tasks are seen by polling every interval", zap.Error(err))
		}
	}()
	return func() { <-done }
}
