package chore

import "time"

// Share is the most of the database's time a periodic chore of the
// pass (the sweep, the oldest-task measurement) may take: after a run
// that took d, the next waits at least d/Share - d. On MongoDB these
// chores are index lookups of a few milliseconds and run at their own
// interval; on a server that reads whole collections for them (the
// development server decodes every task of a query it cannot push down
// to an index: 4 s for the sweep among 30,000 tasks), they run less often
// instead of taking the claims' time.
const Share = 0.05

// Pace spaces out a periodic chore: it is due every interval (in the
// pass's clock), and never sooner than Share allows after its last
// run (in real time, which is what the database spent).
type Pace struct {
	ended time.Time     // when its last run ended (monotonic)
	rest  time.Duration // how long it must wait after that
	// Share is the chore's share of the database's time (zero:
	// Share).
	Share float64
}

// Ready reports whether the chore's share of time allows a run now.
func (p *Pace) Ready() bool {
	return p.ended.IsZero() || time.Since(p.ended) >= p.rest
}

// Ran records a run that began at began (time.Now() then) and has just
// ended.
func (p *Pace) Ran(began time.Time) {
	p.ended = time.Now()
	took := p.ended.Sub(began)
	share := p.Share
	if share == 0 {
		share = Share
	}
	p.rest = time.Duration(float64(took)/share) - took
}
