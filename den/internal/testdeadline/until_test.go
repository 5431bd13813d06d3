package testdeadline

import (
	"testing"
	"time"
)

// Until calls cond until it holds; UntilBy gives up at its end, with
// cond's answer then; the interval is a gap after each call, so that a
// cond slower than it is never called back to back.
func TestUntil(t *testing.T) {
	t.Parallel()
	calls := 0
	if !Until(time.Millisecond, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Fatalf("Until returned after %d calls, want true after 3", calls)
	}
	start := time.Now()
	if UntilBy(start.Add(50*time.Millisecond), time.Millisecond, func() bool { return false }) {
		t.Fatal("UntilBy reported a cond that never held")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("UntilBy gave up after %s, before its end", took)
	}
	var last time.Time
	var gaps []time.Duration
	UntilBy(time.Now().Add(200*time.Millisecond), 20*time.Millisecond, func() bool {
		if !last.IsZero() {
			gaps = append(gaps, time.Since(last))
		}
		time.Sleep(30 * time.Millisecond) // a slow cond, slower than the interval: the subject, not a wait
		last = time.Now()
		return false
	})
	// The last call, at the end, answers whatever the gap.
	for _, g := range gaps[:len(gaps)-1] {
		if g < 20*time.Millisecond {
			t.Fatalf("cond called again %s after it returned, want a gap of the interval (20ms): %v", g, gaps)
		}
	}
}
