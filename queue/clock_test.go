package queue

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Monotonic is CLOCK_MONOTONIC, the clock every process of the host reads
// the same (a runner takes its node's clock anchor at that clock): read
// through time.Now's monotonic reading, it must agree with the system
// call that reads it directly, and never go back.
func TestMonotonicIsTheHostsClock(t *testing.T) {
	t.Parallel()
	last := Monotonic()
	for range 100 {
		before := Monotonic()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		after := Monotonic()
		direct := time.Duration(ts.Nano())
		// The direct reading lies between the two, give or take the
		// anchor's own spread (microseconds; a millisecond is plenty).
		if direct < before-time.Millisecond || direct > after+time.Millisecond {
			t.Fatalf("CLOCK_MONOTONIC read %v, Monotonic %v before and %v after", direct, before, after)
		}
		if before < last {
			t.Fatalf("Monotonic went back from %v to %v", last, before)
		}
		last = after
		// Spread over 100 ms of real time, so that a drift between the
		// two readings would show: the test is of the clock itself, which
		// no signal or injected clock can stand for.
		time.Sleep(time.Millisecond)
	}
}
