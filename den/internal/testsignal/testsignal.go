// Package testsignal lets a component tell a waiting test what it just
// did (a claim, a pass, a task's end), in the manner of River's test
// signals: a Signal is a buffered channel that a test makes with Init;
// production never does, and then Signal does nothing. Signal never
// blocks: a test that stops reading loses signals, never the component's
// progress. A test waits with Wait or WaitFor, bounded by the test
// binary's deadline (package testdeadline), instead of polling the
// database for what the component could say.
package testsignal

import (
	"testing"

	"github.com/den-project/den/den/internal/testdeadline"
)

// buffer is how many signals a Signal keeps for a test that has not read
// them yet; past it, new ones are dropped.
const buffer = 1000

// Signal carries values of T from a component to a test. The zero value
// (and a nil *Signal) is off.
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on. A test calls it before the component starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, buffer) }

// Signal sends v to a waiting test, if the signal is on and its buffer
// has room; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next value signalled, failing t (saying what it waited
// for) at the test binary's deadline.
func (s *Signal[T]) Wait(t testing.TB, what string) T {
	t.Helper()
	return s.WaitFor(t, what, func(T) bool { return true })
}

// WaitFor returns the first value signalled from now that match accepts,
// failing t at the test binary's deadline; the others are dropped.
func (s *Signal[T]) WaitFor(t testing.TB, what string, match func(T) bool) T {
	t.Helper()
	if s.ch == nil {
		t.Fatalf("testsignal: waiting for %s on a signal that is off (call Init first)", what)
	}
	giveUp := testdeadline.GiveUp()
	for {
		select {
		case v := <-s.ch:
			if match(v) {
				return v
			}
		case <-giveUp:
			var zero T
			t.Fatalf("gave up at the test binary's deadline waiting for %s", what)
			return zero
		}
	}
}
