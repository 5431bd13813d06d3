package queue

import (
	"math"
	"strconv"
)

// DurationBounds are the upper bounds, in milliseconds, of the buckets
// the stats count run and wait times in (StatPoint.RunMs, WaitMs): 1, 1.5,
// 2, 3, 5 and 7 times each power of ten from 10 ms to 70,000 s, and
// 100,000 s (about 28 hours). A bucket counts the times above the bound
// before it and up to its own; one more (DurationOver) counts the longer
// ones. Neighbouring bounds are at most 1.67 times apart, so a quantile
// read from the buckets is within that factor, and closer by
// interpolation. The bounds are part of the stored format: a change
// would need new field names.
var DurationBounds = func() []int64 {
	var out []int64
	for p := int64(10); p <= 10_000_000; p *= 10 {
		for _, m := range []int64{10, 15, 20, 30, 50, 70} {
			out = append(out, p*m/10)
		}
	}
	return append(out, 100_000_000)
}()

// DurationOver is the key of the bucket of the times above the last bound.
const DurationOver = "over"

// Durations counts times by bucket of DurationBounds, the last element
// those above them all.
type Durations []int64

// NewDurations is an empty count.
func NewDurations() Durations { return make(Durations, len(DurationBounds)+1) }

// DurationKey is the field name of bucket i in a stats document: its
// bound in milliseconds, or DurationOver.
func DurationKey(i int) string {
	if i >= len(DurationBounds) {
		return DurationOver
	}
	return strconv.FormatInt(DurationBounds[i], 10)
}

// Add counts one time of seconds (a negative one as 0).
func (d Durations) Add(seconds float64) {
	ms := max(seconds, 0) * 1000
	i := 0
	for i < len(DurationBounds) && ms > float64(DurationBounds[i]) {
		i++
	}
	d[i]++
}

// AddAll adds o's counts to d's.
func (d Durations) AddAll(o Durations) {
	for i := range min(len(d), len(o)) {
		d[i] += o[i]
	}
}

// Total is how many times d counts.
func (d Durations) Total() int64 {
	var n int64
	for _, c := range d {
		n += c
	}
	return n
}

// Quantile estimates the q-quantile (0 < q ≤ 1) of the times d counts, in
// seconds: it finds the bucket that holds it and interpolates within the
// bucket's bounds, linearly in the first (from 0) and on a log scale in the
// others. A quantile in the last bucket (above every bound) is its lower
// bound. ok is false when d counts nothing.
func (d Durations) Quantile(q float64) (seconds float64, ok bool) {
	total := d.Total()
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var before float64
	for i, c := range d {
		if c == 0 || before+float64(c) < rank {
			before += float64(c)
			continue
		}
		f := (rank - before) / float64(c)
		switch {
		case i == 0:
			return f * float64(DurationBounds[0]) / 1000, true
		case i >= len(DurationBounds):
			return float64(DurationBounds[len(DurationBounds)-1]) / 1000, true
		default:
			lo, hi := float64(DurationBounds[i-1]), float64(DurationBounds[i])
			return lo * math.Pow(hi/lo, f) / 1000, true
		}
	}
	return float64(DurationBounds[len(DurationBounds)-1]) / 1000, true // not reached
}

// durationsOf reads the buckets of a stats document's field (nil: none);
// a key that is not a bucket's is left out.
func durationsOf(m map[string]int64) Durations {
	d := NewDurations()
	for i := range d {
		d[i] = max(m[DurationKey(i)], 0)
	}
	return d
}
