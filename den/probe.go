package den

import (
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// This file finds work that no count tells of: a task a driver or the
// mongo shell inserted without raising its queue's count_todo, in a queue
// the claims found empty (an idle queue) or in a queue the node has not
// read yet, and a start_after time that has come. The probe is a step of
// every full pass (after the claims) while the node has a free slot, so
// such a task starts at the next pass, as on a Perl node, which claims
// from every queue every pass.

// probeShare is the most of the database's time the probe may take: after
// a probe that took d, the next waits at least d/probeShare - d. On
// MongoDB a probe is an index lookup and runs every pass; on the
// development server, which reads every queued task for it, a probe among
// thousands of queued tasks runs every few passes instead of taking the
// claims' time.
const probeShare = 0.25

// probeFinds is the most queues one probe finds work in (a query each);
// the rest wait for the next probe.
const probeFinds = 20

// freeToFit is what the node has free now for tasks that request
// resources.
func (cl *claimer) freeToFit() queue.Resources {
	return cl.capacity.free(cl.held.Reserved())
}

// nodeFree reports whether the node may take one more task by its
// node-wide limit (none: always).
func (cl *claimer) nodeFree() bool {
	if cl.pass.limit == nil {
		return true
	}
	_, total := cl.held.Counts()
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
func (cl *claimer) probe(ctx context.Context, free queue.Resources, others []queue.Queue, skip map[bson.ObjectID]bool) ([]bson.ObjectID, error) {
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
func (cl *claimer) found(ids []bson.ObjectID) {
	for _, id := range ids {
		cl.seen[id] = true
		delete(cl.empty, id)
	}
}

// probe is the full pass's step that finds work no count tells of
// (claimer.probe), reads the queues it found work in again, and claims.
// It is due every ProbeEvery (every pass by default) while the node has a
// free slot, and as often as its share of the database's time allows
// (probeShare).
type probe struct{ ps *passes }

func (s probe) due(p *fullPass) bool {
	ps, cl := s.ps, s.ps.claimer
	return p.at.Sub(ps.probed.last) >= ps.params.ProbeEvery && cl.pass.ready && !cl.paused() && cl.nodeFree() && ps.probed.pace.Ready()
}

func (s probe) do(ctx context.Context, p *fullPass) error {
	ps, cl := s.ps, s.ps.claimer
	began := time.Now()
	found, err := cl.probe(ctx, cl.freeToFit(), p.queues[len(p.serve):], ps.probed.skip)
	ps.probed.pace.Ran(began)
	if err != nil {
		return err
	}
	ps.probed.last = p.at
	if len(found) == 0 {
		return nil
	}
	if err := ps.refreshQueues(ctx, found, p); err != nil {
		return err
	}
	cl.readPass(p.serve, p.limit, p.gfs, p.byID)
	cl.found(found)
	return cl.claim(ctx)
}
