package chore

import "time"

// PerRound is the most housekeeping writes (rescues, sweeps'
// rewrites and fails) one round of housekeeping makes: the rest wait for
// the next round. 10,000 forged tasks of a dead node are rescued in 50
// rounds instead of one that never ends. A step also stops taking them
// half way through its time (StepTime), so that a server that takes
// seconds a write (the development server scanning 16 MiB documents)
// makes the step end early, with what it did, rather than run out of time.
const PerRound = 200

// Budget is a housekeeping round's budget of writes (PerRound),
// which the rescuer, the sweeper and the retention take from, and the
// time its current step may take them until. Only the housekeeping's
// goroutine uses it.
type Budget struct {
	// StepTime is how long one step of a round may go on taking chores
	// (den: half the pass's time limit).
	StepTime time.Duration

	left    int
	until   time.Time
	overdue bool
}

// Refill starts a round's budget.
func (c *Budget) Refill() { c.left = PerRound }

// Step starts a step of the round, at now.
func (c *Budget) Step(now time.Time) { c.until, c.overdue = now.Add(c.StepTime), false }

// Take reports whether this round's step may make one more housekeeping
// write, and counts it.
func (c *Budget) Take() bool {
	if c.left <= 0 || c.overdue {
		return false
	}
	if !c.until.IsZero() && time.Now().After(c.until) {
		c.overdue = true // the rest next round
		return false
	}
	c.left--
	return true
}

// Spent reports whether this round's budget, or its step's time, is used
// up: what is left waits for the next round.
func (c *Budget) Spent() bool { return c.left <= 0 || c.overdue }

// Left is how many writes this round's budget has left.
func (c *Budget) Left() int { return c.left }
