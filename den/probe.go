package den

import (
	"context"
	"time"
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

// probe is the full pass's step that finds work no count tells of
// (claim.Claimer.Probe), reads the queues it found work in again, and claims.
// It is due every ProbeEvery (every pass by default) while the node has a
// free slot, and as often as its share of the database's time allows
// (probeShare).
type probe struct{ ps *passes }

func (s probe) due(p *fullPass) bool {
	ps, cl := s.ps, s.ps.claimer
	return p.at.Sub(ps.probed.last) >= ps.params.ProbeEvery && cl.MayProbe() && ps.probed.pace.Ready()
}

func (s probe) do(ctx context.Context, p *fullPass) error {
	ps, cl := s.ps, s.ps.claimer
	began := time.Now()
	found, err := cl.Probe(ctx, cl.FreeToFit(), p.queues[len(p.serve):], ps.probed.skip)
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
	cl.ReadPass(p.serve, p.limit, p.gfs, p.byID)
	cl.Found(found)
	return cl.Claim(ctx)
}
