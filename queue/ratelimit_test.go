package queue_test

import (
	"cmp"
	"strconv"
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
		g, err := rates.Take(ctx, q, l, bson.NewObjectID(), "n1", at)
		if err != nil {
			t.Fatalf("take at %s: %v", at, err)
		}
		if len(g.Repaired) > 0 {
			t.Errorf("take at %s repaired %q in slots only den wrote", at, g.Repaired)
		}
		return g.OK, g.Next
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

	// Many takers at once, for a fresh queue: exactly Starts granted,
	// and each refusal names a time the window frees, not now (a
	// refusal while a slot was free). A taker whose take found no slot
	// (none made yet) may read them after another made them, free: it
	// must take one then. Several fresh queues, each a new race.
	l2 := queue.RateLimit{Starts: 3, Per: time.Minute}
	for round := range 4 {
		q2 := bson.NewObjectID()
		var mu sync.Mutex
		granted := 0
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				at := t0.Add(time.Duration(i) * time.Millisecond)
				g, err := rates.Take(ctx, q2, l2, bson.NewObjectID(), "n"+string(rune('a'+i%4)), at)
				if err != nil {
					t.Errorf("round %d: take: %v", round, err)
				}
				if !g.OK && err == nil && !g.Next.After(at) {
					t.Errorf("round %d: take at +%s refused with the next start at +%s, not after it", round, at.Sub(t0), g.Next.Sub(t0))
				}
				if g.OK {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if granted != l2.Starts {
			t.Errorf("round %d: %d takers at once were granted %d starts, limit %d", round, 12, granted, l2.Starts)
		}
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

// Documents a writer forged in rate_limits neither stop a queue nor let
// more of its tasks start than its limit: each case below is written
// before the queue's first start (a limit of 2 per 10 s, or 1), then 4 takes
// come at once: exactly the limit's starts are granted, whatever the documents say, and
// the queue's next start is not put off by them (NextStarts before the
// takes finds it free).
func TestRateLimitForgedSlots(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	year9999 := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		starts int // of the limit, per 10 s; 0: 2
		docs   func(q bson.ObjectID) []any
	}{
		{"the issue's: slot -1 dated 9999", 1, func(q bson.ObjectID) []any {
			return []any{bson.D{{Key: "queue", Value: q}, {Key: "slot", Value: -1}, {Key: "at", Value: year9999}}}
		}},
		{"its own slots dated 9999", 0, func(q bson.ObjectID) []any {
			return []any{bson.D{{Key: "_id", Value: q.Hex() + "/0"}, {Key: "queue", Value: q}, {Key: "slot", Value: 0}, {Key: "at", Value: year9999}},
				bson.D{{Key: "_id", Value: q.Hex() + "/1"}, {Key: "queue", Value: q}, {Key: "slot", Value: 1}, {Key: "at", Value: year9999}}}
		}},
		{"its own slots with at not a date, or none", 0, func(q bson.ObjectID) []any {
			return []any{bson.D{{Key: "_id", Value: q.Hex() + "/0"}, {Key: "queue", Value: q}, {Key: "slot", Value: 0}, {Key: "at", Value: "9999-01-01"}},
				bson.D{{Key: "_id", Value: q.Hex() + "/1"}, {Key: "queue", Value: q}, {Key: "slot", Value: 1}}}
		}},
		{"its own slots naming another slot or queue", 0, func(q bson.ObjectID) []any {
			return []any{bson.D{{Key: "_id", Value: q.Hex() + "/0"}, {Key: "queue", Value: q}, {Key: "slot", Value: "0"}, {Key: "at", Value: year9999}},
				bson.D{{Key: "_id", Value: q.Hex() + "/1"}, {Key: "queue", Value: bson.NewObjectID()}, {Key: "slot", Value: 1}, {Key: "at", Value: year9999}}}
		}},
		{"slots past the limit and below 0, each dated 9999", 0, func(q bson.ObjectID) []any {
			var out []any
			for _, i := range []int{-3, -1, 2, 7, 999} {
				out = append(out, bson.D{{Key: "_id", Value: q.Hex() + "/" + strconv.Itoa(i)}, {Key: "queue", Value: q}, {Key: "slot", Value: i}, {Key: "at", Value: year9999}})
			}
			return out
		}},
		{"extra free slots under other ids", 0, func(q bson.ObjectID) []any {
			var out []any
			for i := range 4 {
				out = append(out, bson.D{{Key: "_id", Value: "forged" + strconv.Itoa(i)}, {Key: "queue", Value: q}, {Key: "slot", Value: i % 2}, {Key: "at", Value: time.Unix(0, 0)}})
			}
			return out
		}},
		{"extra slots under other ids, dated 9999", 0, func(q bson.ObjectID) []any {
			var out []any
			for i := range 4 {
				out = append(out, bson.D{{Key: "queue", Value: q}, {Key: "slot", Value: i % 2}, {Key: "at", Value: year9999}})
			}
			return out
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := dentest.Context(t)
			db := dentest.DB(t)
			rates := queue.NewRateLimits(db)
			q := bson.NewObjectID()
			l := queue.RateLimit{Starts: cmp.Or(c.starts, 2), Per: 10 * time.Second}
			docs := c.docs(q)
			dentest.Insert(t, db.Collection(queue.RateLimitsCollection), docs...)
			full, err := rates.NextStarts(ctx, map[bson.ObjectID]queue.RateLimit{q: l}, t0)
			if err != nil || len(full) != 0 {
				t.Errorf("NextStarts before any start = %v, %v; want the queue free", full, err)
			}
			granted := 0
			var repaired []string
			for i := range 4 {
				g, err := rates.Take(ctx, q, l, bson.NewObjectID(), "n1", t0.Add(time.Duration(i)*time.Millisecond))
				if err != nil {
					t.Fatalf("take %d: %v", i, err)
				}
				repaired = append(repaired, g.Repaired...)
				if g.OK {
					granted++
				} else if g.Next.After(t0.Add(l.Per)) {
					t.Errorf("take %d refused until %s, past the window of the first start (%s)", i, g.Next, t0.Add(l.Per))
				}
			}
			t.Logf("repaired: %q", repaired)
			if len(repaired) > len(docs) {
				t.Errorf("%d repairs said, want at most %d (one per forged document)", len(repaired), len(docs))
			}
			if granted != l.Starts {
				t.Errorf("%d starts granted at once under a limit of %d", granted, l.Starts)
			}
		})
	}
}
