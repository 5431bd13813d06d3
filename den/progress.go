package den

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/queue"
)

// stuckAfter is how long the loop may go without completing a step
// before /readyz calls it stuck: 30 intervals, and at least the pass's
// one-minute limit and half as much again. One command may take up to that
// limit on a slow server (a read of 80,000 queues on the development
// server under load took 30 s) before it is cut and the next pass tries
// again; past it, no pass gets anywhere. houseStall is how long a step of
// the housekeeping may go without completing before /readyz notes it:
// half the step's limit (a note, not a failure: claims go on).
func stuckAfter(interval time.Duration) time.Duration {
	return max(30*interval, passLimit+passLimit/2)
}

const houseStall = passLimit / 2

// ago formats a duration for /readyz.
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// health is what Ready goes by: how the claims' loop and the housekeeping
// get on, which they write as they go and any goroutine reads.
type health struct {
	interval time.Duration
	clock    *queue.Clock
	// lastPassOK is when a full pass last succeeded (UnixNano), and
	// lastPassTook how long it took; passStarted when the full pass under
	// way started (0: none); outage is what Ready says while passes fail
	// (MongoDB unreachable or failing, or a document den cannot read: see
	// passes.setOutage), nil while they succeed; runningSince is when the
	// loop started.
	lastPassOK   atomic.Int64
	lastPassTook atomic.Int64
	passStarted  atomic.Int64
	outage       atomic.Pointer[string]
	runningSince atomic.Int64
	// loop and house are when the loop and the housekeeping last completed
	// a step; roundStarted is when the housekeeping's round under way
	// started (0: none), houseStep its step under way, houseProblem why its
	// last round failed (nil: it did not). The times of its last completed
	// round go to the heartbeat (heartbeat.lastRound), which the node
	// document carries.
	loop, house  *base.Progress
	roundStarted atomic.Int64
	houseStep    atomic.Pointer[string]
	houseProblem atomic.Pointer[string]
}

// report is what Ready says of the loops: an error when the node is not
// ready (MongoDB unreachable or failing, a document den cannot read, or
// the claims' loop stuck: no step completed for stuckAfter), else a note
// (empty when all is well) saying that the node works but its passes are
// slow, or that its housekeeping makes no progress or fails.
func (h *health) report() (string, error) {
	outage := h.outage.Load()
	now := h.clock.Now()
	bound := stuckAfter(h.interval)
	within := max(3*h.interval, 3*time.Second)
	var lastPass string
	if last := h.lastPassOK.Load(); last != 0 {
		lastPass = fmt.Sprintf("the last full pass completed %s ago and took %s", ago(now.Sub(time.Unix(0, last))), ago(time.Duration(h.lastPassTook.Load())))
	} else {
		lastPass = "no full pass has completed yet"
	}
	age, step, ok := h.loop.Since(now)
	if !ok {
		age, step = now.Sub(time.Unix(0, h.runningSince.Load())), "start"
	}
	if age > bound {
		err := fmt.Errorf("stuck: no progress for %s (more than %s): the loop's last step was %s; %s", ago(age), ago(bound), step, lastPass)
		if outage != nil {
			err = fmt.Errorf("%w; %s", err, *outage)
		}
		return "", err
	}
	if outage != nil {
		return "", fmt.Errorf("%s", *outage)
	}
	var note string
	switch last := h.lastPassOK.Load(); {
	case last == 0:
		since := h.passStarted.Load()
		if since == 0 {
			since = h.runningSince.Load()
		}
		note = fmt.Sprintf("working: the first full pass has been under way for %s; the loop's last step, %s, completed %s ago", ago(now.Sub(time.Unix(0, since))), step, ago(age))
	case now.Sub(time.Unix(0, last)) > within:
		note = fmt.Sprintf("working, passes are slow: %s; the loop's last step, %s, completed %s ago", lastPass, step, ago(age))
	}
	if house := h.houseNote(now, houseStall); house != "" {
		if note != "" {
			note += "; "
		}
		note += house
	}
	return note, nil
}

// houseNote says what is wrong with the housekeeping: a round that has
// made no progress for bound, or the failure of its last round; empty
// when nothing is.
func (h *health) houseNote(now time.Time, bound time.Duration) string {
	if started := h.roundStarted.Load(); started != 0 {
		age, _, ok := h.house.Since(now)
		if round := now.Sub(time.Unix(0, started)); !ok || round < age {
			age = round
		}
		if age > bound {
			step := "?"
			if s := h.houseStep.Load(); s != nil {
				step = *s
			}
			return fmt.Sprintf("housekeeping has made no progress for %s (in its %s step); claims and the node document go on", ago(age), step)
		}
	}
	if p := h.houseProblem.Load(); p != nil {
		return "housekeeping failing, claims go on: " + *p
	}
	return ""
}
