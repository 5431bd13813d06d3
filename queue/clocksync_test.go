package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Before its first sync a clock is the wall clock it was given (the
// host's when nil), and has no anchor to hand on.
func TestClockBeforeSyncIsTheWall(t *testing.T) {
	t.Parallel()
	wall := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	c := queue.NewClock(func() time.Time { return wall })
	if got := c.Now(); !got.Equal(wall) {
		t.Fatalf("Now = %s, want the wall clock's %s", got, wall)
	}
	if server, mono := c.Anchor(); !server.IsZero() || mono != 0 {
		t.Fatalf("Anchor = %s, %s; want none", server, mono)
	}
	before := time.Now()
	got := queue.NewClock(nil).Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("a clock of no wall clock says %s, want the host's time (%s)", got, before)
	}
}

// Sync anchors the clock at the server's time: whatever this host's wall
// clock says, the clock then tells the server's (the development server
// runs on this host, so the host's time is its time), and goes on with
// the monotonic clock. A runner that takes up the anchor (ClockAt) tells
// the same time, read for read. A failed sync says so and leaves the
// clock as it was.
func TestSyncTellsTheServersTime(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	wall := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // a host's clock far off
	c := queue.NewClock(func() time.Time { return wall })

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Sync(cancelled, db); err == nil || !strings.HasPrefix(err.Error(), "ask the server its time: ") {
		t.Fatalf("Sync with a cancelled context: %v, want its error", err)
	}
	if server, _ := c.Anchor(); !server.IsZero() || !c.Now().Equal(wall) {
		t.Fatalf("a failed sync anchored the clock at %s", server)
	}

	if err := queue.NewStore(db).SyncClock(ctx, c); err != nil {
		t.Fatal(err)
	}
	server, mono := c.Anchor()
	if server.IsZero() || mono <= 0 || mono > queue.Monotonic() {
		t.Fatalf("Anchor after a sync = %s at %s, want the server's time at a monotonic time before now (%s)", server, mono, queue.Monotonic())
	}
	// A real MongoDB may run on another host, whose clock may be off by
	// a little; the development server is this host's own.
	slack := time.Minute
	if dentest.EmbeddedServer() {
		slack = 5 * time.Second
	}
	if now, off := c.Now(), time.Since(c.Now()); off < -slack || off > slack {
		t.Fatalf("Now after a sync = %s, %s from the host's time, want the server's", now, off)
	}
	taken := queue.ClockAt(server, mono)
	for range 100 {
		a := c.Now()
		b := taken.Now()
		d := c.Now()
		if b.Before(a) || b.After(d) {
			t.Fatalf("the anchor taken up says %s between %s and %s of the clock it came from", b, a, d)
		}
		if d.Before(a) {
			t.Fatalf("the clock went back from %s to %s", a, d)
		}
	}
}
