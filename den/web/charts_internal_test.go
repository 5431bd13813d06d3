package web

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A run's time reads as people say it, at every scale.
func TestTookText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0 s"},
		{4 * time.Millisecond, "0 s"},
		{420 * time.Millisecond, "0.42 s"},
		{9994 * time.Millisecond, "9.99 s"},
		{12340 * time.Millisecond, "12.3 s"},
		{59940 * time.Millisecond, "59.9 s"},
		{time.Minute, "1 min 00 s"},
		{4*time.Minute + 5*time.Second, "4 min 05 s"},
		{59*time.Minute + 59*time.Second, "59 min 59 s"},
		{2*time.Hour + 3*time.Minute + 20*time.Second, "2 h 03 min"},
		{30 * time.Hour, "30 h 00 min"},
	} {
		if got := tookText(c.d); got != c.want {
			t.Errorf("tookText(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}

// Each range draws its span in steps the stats have, ending with the step
// under way, and marks round times along its axis.
func TestChartRangesBucketsAndTicks(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 7, 12, 34, 56, 0, time.UTC) // a Wednesday
	for _, c := range []struct {
		name        string
		points      int
		first, last string
		ticks       string // index:label, ...
	}{
		{"15m", 15, "12:20", "12:34", "0:12:20 5:12:25 10:12:30"},
		{"hour", 60, "11:35", "12:34", "5:11:40 15:11:50 25:12:00 35:12:10 45:12:20 55:12:30"},
		{"6h", 24, "06:45", "12:30", "1:07:00 5:08:00 9:09:00 13:10:00 17:11:00 21:12:00"},
		{"day", 96, "12:45", "12:30", "9:15:00 21:18:00 33:21:00 45:00:00 57:03:00 69:06:00 81:09:00 93:12:00"},
		{"week", 168, "Wed 31 13:00", "Wed 7 12:00", "11:Thu 1 35:Fri 2 59:Sat 3 83:Sun 4 107:Mon 5 131:Tue 6 155:Wed 7"},
	} {
		r := rangeOf(c.name)
		if r.Name != c.name {
			t.Fatalf("no range %q", c.name)
		}
		times := r.buckets(now)
		format := "15:04"
		if r.Step >= time.Hour {
			format = "Mon 2 15:04"
		}
		if len(times) != c.points || times[0].Format(format) != c.first || times[len(times)-1].Format(format) != c.last {
			t.Errorf("%s: %d points from %s to %s, want %d from %s to %s", c.name, len(times),
				times[0].Format(format), times[len(times)-1].Format(format), c.points, c.first, c.last)
		}
		var got []string
		for _, tk := range r.ticks(times) {
			got = append(got, strconv.Itoa(tk.I)+":"+tk.Label)
		}
		if strings.Join(got, " ") != c.ticks {
			t.Errorf("%s: ticks %q, want %q", c.name, strings.Join(got, " "), c.ticks)
		}
	}
	if rangeOf("").Name != "hour" || rangeOf("year").Name != "hour" {
		t.Errorf("an unknown range is not the hour")
	}
}

// The axis labels every tick but one that would run into the one before
// it, near the right edge; each tick keeps its line.
func TestTickLabelsDoNotOverlap(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 7, 12, 34, 56, 0, time.UTC)
	for _, c := range []struct {
		rng, labels string
		lines       int
	}{
		{"15m", "12:20 12:25 12:30", 3},
		{"day", "15:00 18:00 21:00 00:00 03:00 06:00 09:00", 8}, // 12:00, at the edge, runs into 09:00
		{"week", "Thu 1 Fri 2 Sat 3 Sun 4 Mon 5 Tue 6 Wed 7", 7},
	} {
		r := rangeOf(c.rng)
		svg := string(newChart("x", r, r.buckets(now)).SVG)
		var labels []string
		for _, m := range regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)<`).FindAllStringSubmatch(svg, -1) {
			labels = append(labels, m[1])
		}
		if got := strings.Join(labels, " "); got != c.labels || strings.Count(svg, `<line class="tick"`) != c.lines {
			t.Errorf("%s: labels %q and %d lines, want %q and %d", c.rng, got, strings.Count(svg, `<line class="tick"`), c.labels, c.lines)
		}
	}
}
