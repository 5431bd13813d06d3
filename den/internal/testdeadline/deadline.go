// Package testdeadline tells a test when its waits give up: the test
// binary's -timeout less a margin. Tests wait for what they check (a
// document's state, a channel the code closes, a process's exit) and
// bound the wait only by this, never by a duration tuned to how fast the
// machine or the server is today: on a busy machine a test takes longer,
// and passes; a hang still fails, saying what it waited for, before go
// test's own panic loses the other tests' results.
//
// It has no dependencies, so that any package's tests can use it;
// dentest.Deadline and dentest.GiveUp are the same for tests that use
// the suite's server.
package testdeadline

import (
	"flag"
	"testing"
	"time"
)

// started is when the test binary started, as near as a package
// variable can tell: go test's -timeout counts from about then.
var started = time.Now()

// margin is how long before the binary's -timeout a wait gives up (a
// quarter of a short timeout): long enough for the test to fail with what
// it waited for, and for its cleanups to run, before go test panics.
const margin = 45 * time.Second

// Deadline is when a test's waits give up: the test binary's -timeout
// less a margin, or an hour from the start when it has none (go test
// -timeout 0).
func Deadline() time.Time {
	timeout := time.Hour
	if f := flag.Lookup("test.timeout"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if d, ok := g.Get().(time.Duration); ok && d > 0 {
				timeout = d
			}
		}
	}
	return started.Add(timeout - min(margin, timeout/4))
}

// GiveUp returns a channel that fires at Deadline: the bound of a
// select that waits for a signal from the code.
func GiveUp() <-chan time.Time {
	return time.After(time.Until(Deadline()))
}

// Until calls cond every interval until it returns true, and reports
// whether it did before Deadline. It is the one way the suite polls for
// what no signal reports: a document another process writes, a process
// that exits, a file a program makes. Where the code under test can say
// when something happened (a channel it closes, a hook it calls), a test
// waits for that instead.
func Until(interval time.Duration, cond func() bool) bool {
	return UntilBy(Deadline(), interval, cond)
}

// UntilBy is Until with an earlier end: it gives up at by, or at Deadline
// if that comes first (a benchmark that reports what it got by then).
func UntilBy(by time.Time, interval time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	if d := Deadline(); d.Before(by) {
		by = d
	}
	giveUp := time.NewTimer(time.Until(by))
	defer giveUp.Stop()
	// interval is the gap between two calls, as a sleep would leave, not
	// their period: a slow cond (a query on a loaded server) is not called
	// back to back.
	next := time.NewTimer(interval)
	defer next.Stop()
	for {
		select {
		case <-next.C:
			if cond() {
				return true
			}
			next.Reset(interval)
		case <-giveUp.C:
			return cond()
		}
	}
}

// Wait is Until for a test: it fails t, saying what it waited for, when
// the deadline comes first.
func Wait(t testing.TB, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	if !Until(interval, cond) {
		t.Fatalf("gave up at the test binary's deadline, after %s, waiting for: %s", time.Since(start).Round(time.Second), what)
	}
}
