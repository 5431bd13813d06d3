package human

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/den-project/den/queue"
)

// Ago renders how long before now t was: "12s ago", "3m ago", "5h07m ago",
// "3d ago"; "in 5s" for a time ahead, "-" for none.
func Ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Second).String()
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// Status renders a task's status as its code and name: "2 failed"; a
// queued task that no live den node can run as it requests is "-2 queued
// (unfit)" (Waiting says why).
func Status(t queue.Task) string {
	if !t.StatusOK {
		return "? (not a number)"
	}
	s := fmt.Sprintf("%d %s", t.Status, queue.StatusName(t.Status))
	if Waiting(t) != "" {
		s += " (unfit)"
	}
	return s
}

// Waiting is why a queued task waits, as the nodes noted in its unfit
// field: it requests more than any live den node offers. Empty for a task
// that is not queued, whatever the field says.
func Waiting(t queue.Task) string {
	if !t.StatusOK || t.Status != queue.StatusQueued {
		return ""
	}
	return t.Unfit
}

// LastLine is the last non-empty line of a task's stderr when it is in
// the task document, cut to width characters (never inside a character);
// inGridFS when the stderr is a GridFS file; "" when there is none.
func LastLine(t queue.Task, width int, inGridFS string) string {
	text, file, err := t.Output(queue.StreamStderr)
	switch {
	case errors.Is(err, queue.ErrNoOutput):
		return ""
	case err != nil:
		return err.Error()
	case !file.IsZero():
		return inGridFS
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	s := []rune(strings.TrimSpace(lines[len(lines)-1]))
	if len(s) > width {
		return string(s[:width-3]) + "..."
	}
	return string(s)
}
