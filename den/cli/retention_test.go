package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den queue set writes a queue's retention key by key, as the nodes read
// it, refuses what they could not read with an error saying why, and
// removes it with retention=none.
func TestQueueSetRetention(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	id := dentest.Queue(t, db, "resize", demo.Name, 1, "fifo")
	for _, tc := range []struct {
		kv, say string
	}{
		{"retention.succeeded=7", "below the minimum 1m"},
		{"retention.succeeded=soon", `"soon" is not a duration such as "7d"`},
		{"retention.failed=-1d", "is not a duration"},
		{"retention.cancelled=200y", "is not a duration"},
		{"retention.orphaned=1000000w", "above the maximum of 100 years"},
		{"retention.action=shred", `want "delete" or "archive"`},
		{"retention.reports=burn", `want "keep" or "delete"`},
		{"retention.rescued=1d", "unknown queue setting"},
		{"retention=7d", "set key by key"},
	} {
		r := denDB(t, db, "", "queue", "set", "resize", tc.kv).must(t, ExitUsage, tc.kv)
		if !strings.Contains(r.stderr, tc.say) {
			t.Errorf("den queue set resize %s said %q, want %q", tc.kv, r.stderr, tc.say)
		}
	}
	if q := queueDoc(t, db, id); q["retention"] != nil {
		t.Fatalf("refused settings wrote retention %v", q["retention"])
	}
	denDB(t, db, "", "queue", "set", "resize", "retention.succeeded=7d", "retention.failed=36h", "retention.cancelled=keep",
		"retention.orphaned=2w", "retention.action=Archive", "retention.reports=delete").must(t, ExitOK)
	q, problem, err := queue.NewStore(db).FindQueue(dentest.Context(t), "resize")
	if err != nil || problem != nil || q.RetentionProblem != "" {
		t.Fatalf("find queue: %v, %v, %q", err, problem, q.RetentionProblem)
	}
	day := 24 * time.Hour
	want := map[string]time.Duration{queue.RetainSucceeded: 7 * day, queue.RetainFailed: 36 * time.Hour,
		queue.RetainCancelled: queue.KeepForever, queue.RetainOrphaned: 14 * day}
	for class, d := range want {
		if q.Retention.Keep[class] != d {
			t.Errorf("retention of %s: %v, want %v", class, q.Retention.Keep[class], d)
		}
	}
	if q.Retention.Action != queue.RetireArchive || q.Retention.Reports != queue.ReportsDelete {
		t.Errorf("retention action %q, reports %q", q.Retention.Action, q.Retention.Reports)
	}
	denDB(t, db, "", "queue", "set", "resize", "retention.failed=none").must(t, ExitOK)
	if q, _, err := queue.NewStore(db).FindQueue(dentest.Context(t), "resize"); err != nil || q.Retention.Keep[queue.RetainFailed] != 0 ||
		q.Retention.Keep[queue.RetainSucceeded] != 7*day {
		t.Errorf("after retention.failed=none: %v, %v", q.Retention, err)
	}
	denDB(t, db, "", "queue", "set", "resize", "retention=none").must(t, ExitOK)
	if q := queueDoc(t, db, id); q["retention"] != nil {
		t.Errorf("retention=none left %v", q["retention"])
	}
}
