package queue_test

import (
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A rate limit grants at most Starts starts in any window of Per, on the
// server: the starts granted, one after another and by many takers at
// once, never number more than Starts in a window; a refusal says when
// the next start frees; an older start leaving the window frees one.
func TestRateLimitTake(t *testing.T) {
	t.Parallel()
	ctx := dentest.Context(t)
	db := dentest.DB(t)
	rates := queue.NewRateLimits(db)
	q := bson.NewObjectID()
	l := queue.RateLimit{Starts: 2, Per: 10 * time.Second}
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	take := func(at time.Time) (bool, time.Time) {
		t.Helper()
		ok, next, err := rates.Take(ctx, q, l, bson.NewObjectID(), "n1", at)
		if err != nil {
			t.Fatalf("take at %s: %v", at, err)
		}
		return ok, next
	}
	for i, c := range []struct {
		at   time.Duration
		ok   bool
		next time.Duration // when refused
	}{
		{0, true, 0},                                       // makes the queue's slots
		{3 * time.Second, true, 0},                         // two in the window
		{5 * time.Second, false, 10 * time.Second},         // full until the first leaves it
		{9999 * time.Millisecond, false, 10 * time.Second}, // still full
		{10 * time.Second, true, 0},                        // the first left it
		{11 * time.Second, false, 13 * time.Second},        // 3 s and 10 s are in it
		{13 * time.Second, true, 0},                        // 3 s left it
		{13*time.Second + time.Millisecond, false, 20 * time.Second},
	} {
		ok, next := take(t0.Add(c.at))
		if ok != c.ok {
			t.Fatalf("step %d at +%s: granted %v, want %v", i, c.at, ok, c.ok)
		}
		if !ok && !next.Equal(t0.Add(c.next)) {
			t.Errorf("step %d at +%s: next start at +%s, want +%s", i, c.at, next.Sub(t0), c.next)
		}
	}
	full, err := rates.NextStarts(ctx, map[bson.ObjectID]queue.RateLimit{q: l, bson.NewObjectID(): l}, t0.Add(14*time.Second))
	if err != nil || len(full) != 1 || !full[q].Equal(t0.Add(20*time.Second)) {
		t.Errorf("NextStarts = %v, %v; want queue %s full until +20s", full, err, q.Hex())
	}
	if ok, _ := take(t0.Add(14 * time.Second)); ok {
		t.Error("granted a third start in a window of a limit of 2")
	}
	// The limit raised to 3: its new slot is made, and one more start
	// is granted in the same window, then no more.
	l = queue.RateLimit{Starts: 3, Per: 10 * time.Second}
	if ok, _ := take(t0.Add(14 * time.Second)); !ok {
		t.Error("a limit raised to 3 granted no third start")
	}
	if ok, next := take(t0.Add(15 * time.Second)); ok || !next.Equal(t0.Add(20*time.Second)) {
		t.Errorf("a limit of 3 with 3 starts in the window: granted %v, next +%s", ok, next.Sub(t0))
	}

	// Many takers at once, for a fresh queue: exactly Starts granted.
	q2 := bson.NewObjectID()
	l2 := queue.RateLimit{Starts: 3, Per: time.Minute}
	var mu sync.Mutex
	granted := 0
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := rates.Take(ctx, q2, l2, bson.NewObjectID(), "n"+string(rune('a'+i%4)), t0.Add(time.Duration(i)*time.Millisecond))
			if err != nil {
				t.Errorf("take: %v", err)
			}
			if ok {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != l2.Starts {
		t.Errorf("%d takers at once were granted %d starts, limit %d", 12, granted, l2.Starts)
	}
}

func TestDecodeRateLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		doc  any
		want *queue.RateLimit
	}{
		{bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}}, &queue.RateLimit{Starts: 2, Per: 10 * time.Second}},
		{bson.D{{Key: "starts", Value: 2.0}, {Key: "per", Value: 0.5}}, &queue.RateLimit{Starts: 2, Per: 500 * time.Millisecond}},
		{bson.D{{Key: "starts", Value: "5"}, {Key: "per", Value: "1m"}}, &queue.RateLimit{Starts: 5, Per: time.Minute}},
		{nil, nil},
		{bson.D{{Key: "starts", Value: 0}, {Key: "per", Value: 10}}, nil},
		{bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 0}}, nil},
		{bson.D{{Key: "starts", Value: 2}}, nil},
		{bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}, {Key: "burst", Value: 3}}, nil},
		{bson.D{{Key: "starts", Value: 1001}, {Key: "per", Value: 10}}, nil},
		{"2/10s", nil},
		{5, nil},
	} {
		raw, _ := bson.Marshal(bson.D{{Key: "rate_limit", Value: c.doc}})
		got, err := queue.DecodeRateLimit(bson.Raw(raw).Lookup("rate_limit"))
		switch {
		case c.want != nil && (err != nil || got == nil || *got != *c.want):
			t.Errorf("rate_limit %v: %v, %v; want %v", c.doc, got, err, *c.want)
		case c.want == nil && c.doc != nil && err == nil:
			t.Errorf("rate_limit %v: %v, want an error", c.doc, got)
		case c.doc == nil && (got != nil || err != nil):
			t.Errorf("rate_limit null: %v, %v; want no limit", got, err)
		}
	}
	if l, err := queue.ParseRateLimit("2/10s"); err != nil || l != (queue.RateLimit{Starts: 2, Per: 10 * time.Second}) {
		t.Errorf("ParseRateLimit(2/10s) = %v, %v", l, err)
	}
	for _, bad := range []string{"2", "x/10", "2/x", "0/10", "2/0"} {
		if _, err := queue.ParseRateLimit(bad); err == nil {
			t.Errorf("ParseRateLimit(%q) gave no error", bad)
		}
	}
}
