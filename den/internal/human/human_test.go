package human

import (
	"testing"
	"time"

	"github.com/den-project/den/queue"
)

func TestAgo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now.Add(5 * time.Second), "in 5s"},
		{now.Add(-12 * time.Second), "12s ago"},
		{now.Add(-3 * time.Minute), "3m ago"},
		{now.Add(-(5*time.Hour + 7*time.Minute)), "5h07m ago"},
		{now.Add(-72 * time.Hour), "3d ago"},
	} {
		if got := Ago(now, c.t); got != c.want {
			t.Errorf("Ago(%v) = %q, want %q", now.Sub(c.t), got, c.want)
		}
	}
	if got := Status(queue.Task{Status: 2, StatusOK: true}); got != "2 failed" {
		t.Errorf("Status = %q", got)
	}
	if got := Status(queue.Task{}); got != "? (not a number)" {
		t.Errorf("Status of an unreadable status = %q", got)
	}
}
