package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den schedule add, list, show, pause, resume and delete, and the bad
// input each refuses with exit 2 and a clear reason.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dentest.Queue(t, db, "reports", demo.Name, 1, "fifo")
	denDB(t, db, "", "schedule", "add", "nightly", "--queue", "reports", "--cron", "0 2 * * 1-5", "--tz", "Europe/Berlin",
		"--parameters", `{"report": "daily"}`, "--task", `{"timeout": 600}`).must(t, ExitOK)
	denDB(t, db, "", "schedule", "add", "poll", "--queue", "reports", "--every", "5m", "--overlap", "allow", "--missed", "once").must(t, ExitOK)
	var rows []scheduleRow
	denDB(t, db, "", "schedule", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 2 || rows[0].Name != "nightly" || rows[0].Queue != "reports" || rows[0].When != `cron "0 2 * * 1-5" Europe/Berlin` || rows[0].Next == "" ||
		rows[1].When != "every 5m0s" || rows[1].Missed != "once" || rows[1].Overlap != "allow" {
		t.Fatalf("den schedule list --json: %+v", rows)
	}
	next, _ := time.Parse(time.RFC3339, rows[0].Next)
	if next.In(mustZone(t, "Europe/Berlin")).Hour() != 2 || !next.After(time.Now()) {
		t.Errorf("nightly's next time %v is not 02:00 in Berlin, ahead", next)
	}
	list := denDB(t, db, "", "schedule", "list").must(t, ExitOK)
	if !strings.Contains(list.stdout, "nightly") || !strings.Contains(list.stdout, "active") {
		t.Errorf("den schedule list:\n%s", list.stdout)
	}
	show := denDB(t, db, "", "schedule", "show", "nightly").must(t, ExitOK)
	if !strings.Contains(show.stdout, "daily") || !strings.Contains(show.stdout, "600") {
		t.Errorf("den schedule show:\n%s", show.stdout)
	}
	denDB(t, db, "", "schedule", "pause", "nightly").must(t, ExitOK)
	if sc, _ := queue.NewStore(db).Schedule(dentest.Context(t), "nightly"); !sc.Paused {
		t.Error("pause did not pause")
	}
	denDB(t, db, "", "schedule", "resume", "nightly").must(t, ExitOK)
	if sc, _ := queue.NewStore(db).Schedule(dentest.Context(t), "nightly"); sc.Paused {
		t.Error("resume did not resume")
	}
	// The task a schedule inserts carries its fields.
	f, err := queue.NewStore(db).FireDue(dentest.Context(t), time.Now().Add(6*time.Minute))
	if err != nil || len(f.Inserted) != 1 {
		t.Fatalf("firing poll: %+v %v", f, err)
	}
	task := dentest.Task(t, db, f.Inserted[0])
	if task.Lookup("schedule").StringValue() != "poll" || task.Lookup("status").AsInt64() != -2 {
		t.Errorf("scheduled task: %s", task)
	}

	for _, tc := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"add", "x", "--queue", "reports", "--cron", "61 * * * *"}, ExitUsage, "above maximum"},
		{[]string{"add", "x", "--queue", "reports", "--cron", "* * * * *", "--tz", "Nowhere/Land"}, ExitUsage, "unknown time zone"},
		{[]string{"add", "x", "--queue", "reports"}, ExitUsage, "give cron"},
		{[]string{"add", "x", "--queue", "reports", "--every", "0"}, ExitUsage, "--every 0s: an interval must be positive"},
		{[]string{"add", "x", "--queue", "reports", "--every", "-5m"}, ExitUsage, "--every -5m0s: an interval must be positive"},
		{[]string{"add", "x", "--queue", "reports", "--every", "1m", "--parameters", `[1,2]`}, ExitUsage, "--parameters"},
		{[]string{"add", "x", "--queue", "reports", "--every", "1m", "--parameters", `"text"`}, ExitUsage, "--parameters"},
		{[]string{"add", "x", "--every", "1m"}, ExitUsage, "--queue is required"},
		{[]string{"add", "x", "--queue", "nope", "--every", "1m"}, ExitError, "no such queue"},
		{[]string{"add", "nightly", "--queue", "reports", "--every", "1m"}, ExitError, "exists already"},
		{[]string{"pause", "nope"}, ExitError, "no schedule"},
		{[]string{"delete", "nope"}, ExitError, "no schedule"},
	} {
		r := denDB(t, db, "", append([]string{"schedule"}, tc.args...)...).must(t, tc.code, tc.args...)
		if !strings.Contains(r.stderr, tc.say) {
			t.Errorf("den schedule %v: %q, want it to say %q", tc.args, r.stderr, tc.say)
		}
	}
	denDB(t, db, "", "schedule", "delete", "nightly").must(t, ExitOK)
	if n, _ := db.Collection("schedules").CountDocuments(dentest.Context(t), bson.D{}); n != 1 {
		t.Errorf("%d schedules after deleting one of two", n)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
