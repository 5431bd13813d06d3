package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sys/unix"
)

// Clock is the database server's time, as this host estimates it: the
// server's time when it last asked (hello's localTime), plus the time
// this host's monotonic clock has counted since. Hosts whose wall clocks
// disagree by minutes agree on it to within a round trip, so that what
// den decides from times (a runner's lease, a node taken for dead) does not
// move with a host's clock. The monotonic clock is the host's
// (CLOCK_MONOTONIC), the same in every process: a runner started by a
// node carries the node's anchor (ClockAt) and needs no query of its own.
// Before its first Sync, a Clock is the host's wall clock.
type Clock struct {
	wall func() time.Time
	mu   sync.Mutex
	// server is the server's time at mono, this host's monotonic time;
	// zero until synced.
	server time.Time
	mono   time.Duration
}

// NewClock returns a clock that is wall (nil: time.Now) until it is synced.
func NewClock(wall func() time.Time) *Clock {
	if wall == nil {
		wall = time.Now
	}
	return &Clock{wall: wall}
}

// ClockAt returns a clock anchored where another process's was: server
// time at the host's monotonic time mono (Anchor).
func ClockAt(server time.Time, mono time.Duration) *Clock {
	return &Clock{wall: time.Now, server: server, mono: mono}
}

// Monotonic is this host's monotonic time (CLOCK_MONOTONIC), which runs
// while the host runs and is the same in every process.
//
// It is read once, with a system call, and from then on through the
// monotonic reading of time.Now, which is the same clock read without a
// system call (the vDSO): a node and its runners read it several times
// per task.
func Monotonic() time.Duration {
	a := monoAnchor()
	return a.base + time.Since(a.at)
}

// monoAnchor is CLOCK_MONOTONIC (base) at the time at, read where the two
// readings lie closest together of a few tries.
var monoAnchor = sync.OnceValue(func() struct {
	base time.Duration
	at   time.Time
} {
	var best struct {
		base time.Duration
		at   time.Time
	}
	spread := time.Duration(-1)
	for range 5 {
		before := time.Now()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			continue
		}
		after := time.Now()
		if d := after.Sub(before); spread < 0 || d < spread {
			spread = d
			best.base, best.at = time.Duration(ts.Nano()), before.Add(d/2)
		}
	}
	if spread < 0 {
		best.at = time.Now() // no clock_gettime: counts from here
	}
	return best
})

// Now is the server's time now, by this host's estimate.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	server, mono := c.server, c.mono
	c.mu.Unlock()
	if server.IsZero() {
		return c.wall()
	}
	return server.Add(Monotonic() - mono)
}

// Anchor is the clock's anchor, for a process that takes it up (ClockAt);
// a zero time when it was never synced.
func (c *Clock) Anchor() (server time.Time, mono time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server, c.mono
}

// Sync asks the server its time (one hello) and anchors the clock there,
// at the middle of the round trip.
func (c *Clock) Sync(ctx context.Context, db *mongo.Database) error {
	before := Monotonic()
	raw, err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	after := Monotonic()
	if err != nil {
		return fmt.Errorf("ask the server its time: %w", err)
	}
	t, ok := raw.Lookup("localTime").TimeOK()
	if !ok {
		return fmt.Errorf("ask the server its time: hello has no localTime")
	}
	c.mu.Lock()
	c.server, c.mono = t, before+(after-before)/2
	c.mu.Unlock()
	return nil
}

// SyncClock syncs c with this store's server (Clock.Sync).
func (s *Store) SyncClock(ctx context.Context, c *Clock) error { return c.Sync(ctx, s.db) }
