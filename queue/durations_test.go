package queue

import (
	"math"
	"testing"
)

// Quantiles read from the buckets are within a bucket of the true ones,
// interpolated on a log scale; the buckets' keys are their bounds.
func TestDurationQuantiles(t *testing.T) {
	t.Parallel()
	if len(DurationBounds) != 43 || DurationBounds[0] != 10 || DurationBounds[6] != 100 || DurationBounds[42] != 100_000_000 {
		t.Fatalf("bounds %v", DurationBounds)
	}
	for i := 1; i < len(DurationBounds); i++ {
		if r := float64(DurationBounds[i]) / float64(DurationBounds[i-1]); r <= 1 || r > 1.67 {
			t.Errorf("bounds %d and %d are %.2f apart", DurationBounds[i-1], DurationBounds[i], r)
		}
	}
	if DurationKey(0) != "10" || DurationKey(8) != "200" || DurationKey(43) != DurationOver {
		t.Errorf("keys %s %s %s", DurationKey(0), DurationKey(8), DurationKey(43))
	}
	many := func(n int, s float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	for _, c := range []struct {
		name     string
		times    []float64
		q        float64
		want     float64 // seconds
		ok       bool
		within   float64 // relative
		wantKeys map[int]int64
	}{
		{name: "none", q: 0.5},
		{name: "one of 0.3 s: its bucket (0.2, 0.3]", times: []float64{0.3}, q: 0.5, want: 0.2 * math.Sqrt(1.5), ok: true, within: 1e-9, wantKeys: map[int]int64{9: 1}},
		{name: "a bound itself is in the bucket it bounds", times: []float64{1}, q: 1, want: 1, ok: true, within: 1e-9, wantKeys: map[int]int64{12: 1}},
		{name: "first bucket, linear from 0", times: []float64{0, 0.001, 0.005, 0.009}, q: 0.5, want: 0.005, ok: true, within: 1e-9},
		{name: "negative counts as 0", times: []float64{-3}, q: 1, want: 0.01, ok: true, within: 1e-9, wantKeys: map[int]int64{0: 1}},
		{name: "beyond the last bound", times: []float64{200_000}, q: 0.5, want: 100_000, ok: true, within: 1e-9, wantKeys: map[int]int64{43: 1}},
		{name: "p50 of 90 fast and 10 slow", times: append(many(90, 0.12), many(10, 40)...), q: 0.5, want: 0.12, ok: true, within: 0.25},
		{name: "p95 of 90 fast and 10 slow", times: append(many(90, 0.12), many(10, 40)...), q: 0.95, want: 40, ok: true, within: 0.3},
		{name: "p95 of 1..100 s", times: func() []float64 {
			var out []float64
			for i := 1; i <= 100; i++ {
				out = append(out, float64(i))
			}
			return out
		}(), q: 0.95, want: 95, ok: true, within: 0.1},
	} {
		d := NewDurations()
		for _, s := range c.times {
			d.Add(s)
		}
		for i, n := range c.wantKeys {
			if d[i] != n {
				t.Errorf("%s: bucket %s counts %d, want %d (%v)", c.name, DurationKey(i), d[i], n, d)
			}
		}
		got, ok := d.Quantile(c.q)
		if ok != c.ok || (ok && math.Abs(got-c.want) > c.within*c.want) {
			t.Errorf("%s: p%g = %g (%v), want %g (%v)", c.name, c.q*100, got, ok, c.want, c.ok)
		}
		// Read back from a document's buckets, as stored.
		m := map[string]int64{"junk": 7}
		for i, n := range d {
			if n != 0 {
				m[DurationKey(i)] = n
			}
		}
		if back := durationsOf(m); back.Total() != int64(len(c.times)) {
			t.Errorf("%s: %d read back, want %d", c.name, back.Total(), len(c.times))
		}
	}
	// Buckets of several documents add up.
	a, b := NewDurations(), NewDurations()
	a.Add(0.3)
	b.Add(0.3)
	b.Add(7)
	a.AddAll(b)
	if a.Total() != 3 || a[9] != 2 {
		t.Errorf("added up: %v", a)
	}
}
