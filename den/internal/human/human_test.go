package human

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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
	unfit := "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus"
	if got, why := Status(queue.Task{Status: -2, StatusOK: true, Unfit: unfit}), Waiting(queue.Task{Status: -2, StatusOK: true, Unfit: unfit}); got != "-2 queued (unfit)" || why != unfit {
		t.Errorf("queued and unfit: Status = %q, Waiting = %q", got, why)
	}
	if got, why := Status(queue.Task{Status: 1, StatusOK: true, Unfit: unfit}), Waiting(queue.Task{Status: 1, StatusOK: true, Unfit: unfit}); got != "1 succeeded" || why != "" {
		t.Errorf("a finished task with a stale unfit note: Status = %q, Waiting = %q", got, why)
	}
	if got := Status(queue.Task{}); got != "? (not a number)" {
		t.Errorf("Status of an unreadable status = %q", got)
	}
}

func TestLastLine(t *testing.T) {
	t.Parallel()
	task := func(stderr any) queue.Task {
		raw, _ := bson.Marshal(bson.D{{Key: "stderr", Value: stderr}})
		return queue.Task{Raw: raw}
	}
	for _, c := range []struct {
		stderr any
		want   string
	}{
		{nil, ""},
		{"first\nden: exited with code 3\n\n", "den: exited with code 3"},
		{strings.Repeat("é", 40), strings.Repeat("é", 27) + "..."}, // cut between characters, never inside one
		{bson.NewObjectID(), "(in GridFS)"},
		{42, "stderr is 32-bit integer, neither a string nor a GridFS file id"},
	} {
		if got := LastLine(task(c.stderr), 30, "(in GridFS)"); got != c.want {
			t.Errorf("LastLine(%v) = %q, want %q", c.stderr, got, c.want)
		}
	}
}
