package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Retention: how long ended tasks stay in tasks, and what becomes of them
// after (RetireTasks: delete, or archive into tasks_archive). A queue
// says it in its retention field, a document such as
//
//	{succeeded: "7d", failed: "30d", cancelled: "7d", orphaned: "30d",
//	 action: "delete", reports: "keep"}
//
// Every key is optional. A time is a duration ("7d", "36h", "2w", "90m"),
// a number of seconds, or "keep" (never removed, whatever the node's
// default says). A key not given takes the node's default (den's
// retention.* settings), and the node's default keeps everything.

// FieldRetention is the queue field that holds its retention.
const FieldRetention = "retention"

// Retention classes: which ended tasks a retention time applies to.
const (
	RetainSucceeded = "succeeded" // status 1
	RetainFailed    = "failed"    // status 2 and any other positive status
	RetainCancelled = "cancelled" // -5
	RetainOrphaned  = "orphaned"  // -6
)

// RetentionClasses are the classes, in the order they are listed.
var RetentionClasses = []string{RetainSucceeded, RetainFailed, RetainCancelled, RetainOrphaned}

// What a retention does to the Demo plugin's reports of the tasks it
// removes: keeps them (the default: they are the plugin's), or deletes
// them with the tasks.
const (
	ReportsKeep   = "keep"
	ReportsDelete = "delete"
)

// ReportsCollection is where the Demo plugin (Disbatch's and den's)
// writes a report per task, with the task's _id in task_id.
const ReportsCollection = "reports"

// KeepForever is a retention time that keeps a class's tasks for good.
const KeepForever time.Duration = -1

// Retention bounds: a time below MinRetention is refused (a bare 7 meant
// as days is 7 seconds), and one above MaxRetention too.
const (
	MinRetention = time.Minute
	MaxRetention = 100 * 365 * 24 * time.Hour
)

// Retention is a queue's retention, or a node's default. A zero time
// is not set here; KeepForever keeps.
type Retention struct {
	// Keep is how long after it ended (its mtime) a task of each class
	// stays, by class.
	Keep map[string]time.Duration
	// Action is RetireDelete or RetireArchive; empty: not set here.
	Action RetireMode
	// Reports is ReportsKeep or ReportsDelete; empty: not set here.
	Reports string
}

// Over is r with what it leaves unset taken from def.
func (r Retention) Over(def Retention) Retention {
	out := Retention{Keep: map[string]time.Duration{}, Action: r.Action, Reports: r.Reports}
	for _, c := range RetentionClasses {
		out.Keep[c] = r.Keep[c]
		if out.Keep[c] == 0 {
			out.Keep[c] = def.Keep[c]
		}
	}
	if out.Action == "" {
		out.Action = def.Action
	}
	if out.Reports == "" {
		out.Reports = def.Reports
	}
	return out
}

// Removes says whether r removes any task: some class has a time.
func (r Retention) Removes() bool {
	for _, c := range RetentionClasses {
		if r.Keep[c] > 0 {
			return true
		}
	}
	return false
}

// ClassFilter selects the ended tasks of class in queue that ended before
// cutoff (and, for the index's sake, were created before it: an _id is
// never later than its task's end, up to the clocks of those who wrote
// them).
func ClassFilter(queue bson.ObjectID, class string, cutoff time.Time) RetireFilter {
	f := RetireFilter{TaskFilter: TaskFilter{Queues: []bson.ObjectID{queue}}, EndedBefore: cutoff, CreatedBefore: cutoff}
	switch class {
	case RetainSucceeded:
		f.Statuses = []int{StatusSucceeded}
	case RetainFailed:
		f.MinStatus = StatusFailed
	case RetainCancelled:
		f.Statuses = []int{StatusCancelled}
	case RetainOrphaned:
		f.Statuses = []int{StatusOrphaned}
	}
	return f
}

// DecodeRetention reads a queue's retention field. Absent or null is no
// retention of the queue's own. Anything it cannot read is an error
// saying what and why: unknown keys included, so that a misspelt
// "succeded" is not silently a default.
func DecodeRetention(v bson.RawValue) (Retention, error) {
	var r Retention // Keep nil when unset: a node reads every queue's, every pass
	if absent(v) {
		return r, nil
	}
	r.Keep = map[string]time.Duration{}
	doc, ok := v.DocumentOK()
	if !ok {
		return r, fmt.Errorf("is %s, not a document such as {succeeded: \"7d\", action: \"delete\"}", describe(v))
	}
	elems, err := doc.Elements()
	if err != nil {
		return r, fmt.Errorf("cannot be read: %w", err)
	}
	for _, e := range elems {
		key, val := e.Key(), e.Value()
		if absent(val) {
			continue
		}
		var err error
		switch key {
		case RetainSucceeded, RetainFailed, RetainCancelled, RetainOrphaned:
			r.Keep[key], err = decodeKeep(val)
		case "action":
			r.Action, err = decodeAction(val)
		case "reports":
			r.Reports, err = decodeReports(val)
		default:
			err = fmt.Errorf("is not a retention key (known: %s, action, reports)", strings.Join(RetentionClasses, ", "))
		}
		if err != nil {
			return r, fmt.Errorf("%s %w", key, err)
		}
	}
	return r, nil
}

// decodeKeep reads a retention time: "keep", a duration with units up to
// weeks, or a number of seconds.
func decodeKeep(v bson.RawValue) (time.Duration, error) {
	var d time.Duration
	if s, ok := v.StringValueOK(); ok {
		s = strings.ToLower(strings.TrimSpace(s))
		if s == "keep" || s == "forever" {
			return KeepForever, nil
		}
		var err error
		if d, err = ParseRetention(s); err != nil {
			return 0, err
		}
	} else {
		f, ok := v.AsFloat64OK()
		if !ok || math.IsNaN(f) {
			return 0, fmt.Errorf("is %s; want a duration such as \"7d\", a number of seconds, or \"keep\"", describe(v))
		}
		if f > MaxRetention.Seconds() {
			f = MaxRetention.Seconds() + 1
		}
		d = time.Duration(f * float64(time.Second))
	}
	switch {
	case d < MinRetention:
		return 0, fmt.Errorf("is %s, below the minimum 1m (a bare number is seconds: write \"7d\" for a week; \"keep\" keeps)", d)
	case d > MaxRetention:
		return 0, errors.New("is above the maximum of 100 years (write \"keep\" to keep)")
	}
	return d, nil
}

// retentionUnits are the units a retention time may use beyond Go's.
var retentionUnits = map[string]time.Duration{
	"w": 7 * 24 * time.Hour, "d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second,
}

// ParseRetention reads a retention duration: Go's ("36h", "90m") or with
// days and weeks ("7d", "2w", "1d12h"), or a number of seconds.
func ParseRetention(s string) (time.Duration, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f <= MaxRetention.Seconds()+1 {
		return time.Duration(f * float64(time.Second)), nil
	}
	bad := fmt.Errorf("%q is not a duration such as \"7d\", \"36h\", \"2w\" (or \"keep\")", s)
	if s == "" {
		return 0, bad
	}
	var total float64
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		j := i
		for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
			j++
		}
		n, err := strconv.ParseFloat(s[:i], 64)
		unit, ok := retentionUnits[s[i:j]]
		if i == 0 || err != nil || !ok {
			return 0, bad
		}
		total += n * float64(unit)
		s = s[j:]
	}
	if total > float64(MaxRetention) {
		return MaxRetention + 1, nil
	}
	return time.Duration(total), nil
}

func decodeAction(v bson.RawValue) (RetireMode, error) {
	s, _ := v.StringValueOK()
	switch m := RetireMode(strings.ToLower(strings.TrimSpace(s))); m {
	case RetireDelete, RetireArchive:
		return m, nil
	}
	return "", fmt.Errorf("is %s; want \"delete\" or \"archive\"", describe(v))
}

func decodeReports(v bson.RawValue) (string, error) {
	s, _ := v.StringValueOK()
	switch r := strings.ToLower(strings.TrimSpace(s)); r {
	case ReportsKeep, ReportsDelete:
		return r, nil
	}
	return "", fmt.Errorf("is %s; want \"keep\" or \"delete\"", describe(v))
}

// DecodeRetentionSetting checks the value of one retention key (sub:
// succeeded, failed, cancelled, orphaned, action or reports) with the
// decoder the nodes read it with.
func DecodeRetentionSetting(sub string, v bson.RawValue) error {
	var err error
	switch sub {
	case RetainSucceeded, RetainFailed, RetainCancelled, RetainOrphaned:
		_, err = decodeKeep(v)
	case "action":
		_, err = decodeAction(v)
	case "reports":
		_, err = decodeReports(v)
	}
	if err != nil {
		return fmt.Errorf("%s.%s %w", FieldRetention, sub, err)
	}
	return nil
}

// DeleteReports deletes the Demo plugin's reports of tasks.
func (s *Store) DeleteReports(ctx context.Context, tasks []bson.ObjectID) (int64, error) {
	if len(tasks) == 0 {
		return 0, nil
	}
	res, err := s.db.Collection(ReportsCollection).DeleteMany(ctx, bson.D{{Key: "task_id", Value: bson.D{{Key: "$in", Value: tasks}}}})
	if err != nil {
		return 0, fmt.Errorf("delete the reports of %d tasks: %w", len(tasks), err)
	}
	return res.DeletedCount, nil
}
