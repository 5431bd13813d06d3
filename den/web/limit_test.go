package web

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
)

// limit makes key a limited address at now.
func limit(l *limiter, key string, now time.Time) {
	for i := 0; i < LoginFailures; i++ {
		l.failed(key, now)
	}
}

// The limiter's memory is bounded whatever the number of addresses (an
// IPv6 attacker has many /64s), and a flood of new addresses does not
// free a limited one: limits are forgotten last.
func TestLimiterBounded(t *testing.T) {
	l := newLimiter(zap.NewNop())
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	limit(l, "limited", now)
	if _, ok := l.failed("limited", now); !ok {
		t.Fatal("an address with LoginFailures wrong tokens is not limited")
	}
	for i := 0; i < 3*maxLimited; i++ {
		now = now.Add(time.Millisecond)
		l.failed(fmt.Sprintf("2001:db8:%x::/64", i), now)
		if len(l.m) > maxLimited {
			t.Fatalf("%d addresses remembered, want at most %d", len(l.m), maxLimited)
		}
	}
	if _, ok := l.failed("limited", now); !ok {
		t.Error("a flood of new addresses ended an address's limit")
	}
}

// The answers waiting out LoginSlowdown are bounded per address and in
// all, so that many addresses guessing at once (an IPv6 attacker's /64s)
// cannot pin more than slowedMax requests; a place given back is free
// again.
func TestSlowedAnswersBounded(t *testing.T) {
	l := newLimiter(zap.NewNop())
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var releases []func()
	for i := 0; len(releases) < slowedMax+1 && i < 2*slowedMax; i++ {
		key := fmt.Sprintf("2001:db8:%x::/64", i)
		limit(l, key, now)
		held := 0
		for j := 0; j < slowedPerAddress+3; j++ {
			release, ok := l.hold(key)
			if !ok {
				break
			}
			held++
			releases = append(releases, release)
		}
		if held > slowedPerAddress {
			t.Fatalf("%s holds %d slowed answers, want at most %d", key, held, slowedPerAddress)
		}
	}
	if len(releases) != slowedMax || l.held != slowedMax {
		t.Fatalf("%d slowed answers held (%d counted), want %d in all", len(releases), l.held, slowedMax)
	}
	releases[0]()
	if _, ok := l.hold("2001:db8:0::/64"); !ok {
		t.Error("a place given back is not free again")
	}
	if _, ok := l.hold("not limited"); ok {
		t.Error("an address that is not limited holds a slowed answer")
	}
}
