package claim

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// probeFinds is the most queues one probe finds work in (a query each);
// the rest wait for the next probe.
const probeFinds = 20

// freeToFit is what the node has free now for tasks that request
// resources.
func (cl *Claimer) FreeToFit() queue.Resources {
	return cl.Capacity.free(cl.Held.Reserved())
}

// nodeFree reports whether the node may take one more task by its
// node-wide limit (none: always).
func (cl *Claimer) nodeFree() bool {
	if cl.pass.limit == nil {
		return true
	}
	_, total := cl.Held.Counts()
	return total < *cl.pass.limit
}

// probe looks for claimable tasks that no count tells of and returns the
// queues it found them in (at most probeFinds), which the pass reads again
// before it claims from them (passes.refreshQueues, then found).
//
// It asks in one of two ways, whichever names fewer queues: in the served
// queues the claims found empty (idle), or in every queue but those that
// may have work, those this node does not serve (others) and those known
// to be no queue (skip). The second also finds the tasks of a queue the
// node has not read yet; with 80,000 idle queues and a few with work it
// names a few queues where the first would name 80,000.
func (cl *Claimer) Probe(ctx context.Context, free queue.Resources, others []queue.Queue, skip map[bson.ObjectID]bool) ([]bson.ObjectID, error) {
	idle := []bson.ObjectID{}
	var elsewhere []bson.ObjectID
	for _, q := range cl.pass.serve {
		if cl.claimable(q) {
			elsewhere = append(elsewhere, q.ID)
		} else {
			idle = append(idle, q.ID)
		}
	}
	for _, q := range others {
		elsewhere = append(elsewhere, q.ID)
	}
	for id := range skip {
		elsewhere = append(elsewhere, id)
	}
	r := queue.ProbeRequest{At: cl.Now(), Free: &free}
	if len(idle) <= len(elsewhere) {
		r.In = idle
	} else {
		r.NotIn = elsewhere
	}
	var found []bson.ObjectID
	for len(found) < probeFinds {
		if r.In != nil && len(r.In) == 0 {
			break
		}
		id, ok, err := cl.Store.Probe(ctx, r)
		if err != nil || !ok {
			return found, err
		}
		found = append(found, id)
		if r.In != nil {
			r.In = slices.DeleteFunc(r.In, func(x bson.ObjectID) bool { return x == id })
		} else {
			r.NotIn = append(r.NotIn, id)
		}
	}
	return found, nil
}

// found makes the queues the probe found work in claimable: the claims
// try them at once, whatever their counts say.
func (cl *Claimer) Found(ids []bson.ObjectID) {
	for _, id := range ids {
		cl.seen[id] = true
		delete(cl.empty, id)
	}
}
