package web

import (
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
