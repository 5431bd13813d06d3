package claim

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// priorityBook is which served queues have queued tasks with a priority
// field (queue.FieldPriority): claims in them go highest priority first
// (queue.ClaimRequest.Priorities), claims in the others are the
// protocol's one command.
//
// It is learnt with one query (queue.Priorities.Queues) in each full pass
// that is about to claim (due, set by the pass): not in the claim-only
// passes between, so the query costs one command a second at most
// however many tasks are claimed, and an idle node none. A task given a
// priority in a queue that had none is ordered by it from the next full
// pass on (a second at most with the default interval); until then it is
// claimed in the queue's order.
type priorityBook struct {
	// due is set by a full pass: the next claim round learns.
	due bool
	// has is what the last query that asked about a queue answered.
	has map[bson.ObjectID]bool
}

// learn asks, when due, which of the queues about to be claimed from have
// queued tasks with a priority.
func (p *priorityBook) learn(ctx context.Context, store queue.NodeStore, groups ...[]queue.Queue) error {
	if !p.due {
		return nil
	}
	var ids []bson.ObjectID
	for _, g := range groups {
		ids = append(ids, queue.IDs(g)...)
	}
	if len(ids) == 0 {
		return nil
	}
	has, err := store.QueuesWithPriority(ctx, ids)
	if err != nil {
		return err
	}
	if p.has == nil {
		p.has = map[bson.ObjectID]bool{}
	}
	for _, id := range ids {
		p.has[id] = has[id]
	}
	p.due = false
	return nil
}

// any reports whether a claim in the given queues must go by priority.
func (p *priorityBook) any(ids []bson.ObjectID) bool {
	return slices.ContainsFunc(ids, func(id bson.ObjectID) bool { return p.has[id] })
}
