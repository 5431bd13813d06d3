package human

import (
	"fmt"
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

// Status renders a task's status as its code and name: "2 failed".
func Status(t queue.Task) string {
	if !t.StatusOK {
		return "? (not a number)"
	}
	return fmt.Sprintf("%d %s", t.Status, queue.StatusName(t.Status))
}
