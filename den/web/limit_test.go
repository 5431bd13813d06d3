package web

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
)

// The limiter's memory is bounded whatever the number of addresses (an
// IPv6 attacker has many /64s), and a flood of new addresses does not
// free a blocked one: blocks are forgotten last.
func TestLimiterBounded(t *testing.T) {
	l := newLimiter(zap.NewNop())
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < LoginFailures; i++ {
		l.failed("blocked", now)
	}
	if _, ok := l.blocked("blocked", now); !ok {
		t.Fatal("an address with LoginFailures wrong tokens is not blocked")
	}
	for i := 0; i < 3*maxLimited; i++ {
		now = now.Add(time.Millisecond)
		l.failed(fmt.Sprintf("2001:db8:%x::/64", i), now)
		if len(l.m) > maxLimited {
			t.Fatalf("%d addresses remembered, want at most %d", len(l.m), maxLimited)
		}
	}
	if _, ok := l.blocked("blocked", now); !ok {
		t.Error("a flood of new addresses unblocked an address")
	}
}
