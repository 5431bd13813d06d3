package base

import (
	"sync/atomic"
	"time"
)

// Progress is when a loop (the claims' or the housekeeping's) last
// completed a step, and which: what /readyz goes by to tell a loop that
// works, however slowly, from one that is stuck. Any goroutine may read
// it; its loop marks it.
type Progress struct {
	last atomic.Pointer[progressMark]
}

type progressMark struct {
	at   time.Time
	step string
}

// Mark notes that step was completed at now.
func (p *Progress) Mark(step string, now time.Time) {
	p.last.Store(&progressMark{at: now, step: step})
}

// Since is how long ago the last step was completed, and which; ok false
// before the first mark.
func (p *Progress) Since(now time.Time) (age time.Duration, step string, ok bool) {
	m := p.last.Load()
	if m == nil {
		return 0, "", false
	}
	return now.Sub(m.at), m.step, true
}
