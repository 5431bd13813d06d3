package den_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// usageOf decodes a task's (or history entry's) usage, failing the test
// when it has none.
func usageOf(t *testing.T, what string, doc bson.Raw) queue.Usage {
	t.Helper()
	u, ok := queue.UsageOf(doc)
	if !ok {
		t.Fatalf("%s has no usage: %s", what, doc)
	}
	return u
}

// burn is a shell loop of about three seconds of CPU (dash: ~0.3 s per
// 300000 rounds here).
const burn = `i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done`

// Every run records what it used: peak RSS, CPU user
// and system of its whole process tree, processes re-parented to the
// supervisor included, and wall time; a retried run keeps its own in its
// history entry; with usage_interval the usage of a running task is
// updated while it runs. Measured from the process tree (cgroups off), and
// from the run's cgroup where there is one.
func TestResourceUsage(t *testing.T) {
	t.Parallel()
	inEachContainment(t, func(t *testing.T, c containment) { testResourceUsage(t, c.cgroups) })
}

func testResourceUsage(t *testing.T, cgroups string) {
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 4, "fifo", bson.E{Key: "retry_delay", Value: 0}, bson.E{Key: "max_termination_time", Value: 1})
	task := func(shell string, set bson.D) bson.ObjectID {
		id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: shell}})[0]
		if len(set) > 0 {
			dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}})
		}
		return id
	}
	dir := t.TempDir()
	done := filepath.Join(dir, "burnt")
	// tail keeps the last line of its input, here one 150 MB line, in
	// memory. The CPU is burnt by an orphan: a process whose parent exited
	// at once, so the supervisor reaps it, not the shell.
	heavy := task(`head -c 150000000 /dev/zero | tail > /dev/null; (sh -c '`+burn+`; touch `+done+`' &); while [ ! -e `+done+` ]; do sleep 0.1; done`, nil)
	// Runs twice: the first run (400 MB, exit 3) and the retry (small: den's
	// worker, 70 MB under -race) each keep their own usage.
	marker := filepath.Join(dir, "ran")
	retried := task(`if [ ! -e `+marker+` ]; then touch `+marker+`; head -c 400000000 /dev/zero | tail > /dev/null; exit 3; fi; echo ok`,
		bson.D{{Key: "max_retries", Value: 1}})
	// Updated while it runs, every second; ends when told to.
	stopLong := filepath.Join(dir, "stop")
	long := task(`while [ ! -e `+stopLong+` ]; do sleep 0.2; done`, bson.D{{Key: "usage_interval", Value: 1}})
	short := task(`echo hi`, nil)
	startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = cgroups })

	raw := dentest.WaitStatus(t, db, heavy, 1)
	u := usageOf(t, "heavy task", raw)
	t.Logf("heavy task: %+v", u)
	if u.PeakRSSMB < 100 || u.PeakRSSMB > 4000 {
		t.Errorf("heavy task: peak_rss_mb %.1f, want about 150 (100 to 4000)", u.PeakRSSMB)
	}
	// Without the orphan's loop the run has about 1 s (head, tail, den's
	// worker under -race).
	if u.CPUUserS < 2 || u.CPUUserS+u.CPUSystemS > 2*u.WallS+2 {
		t.Errorf("heavy task: cpu_user_s %.3f, cpu_system_s %.3f in wall_s %.3f; want at least 2 s of user CPU (the orphan's loop), no more than the machine's cores could give", u.CPUUserS, u.CPUSystemS, u.WallS)
	}
	if u.PeakMemoryMB != nil && (*u.PeakMemoryMB < 100 || *u.PeakMemoryMB > 4000) {
		t.Errorf("heavy task: peak_memory_mb (the cgroup's memory.peak) %.1f, want about 150 (100 to 4000)", *u.PeakMemoryMB)
	}
	if u.WallS <= 0 || u.Samples < 1 || u.Running || u.At.IsZero() {
		t.Errorf("heavy task: usage %+v", u)
	}

	raw = dentest.WaitStatus(t, db, retried, 1)
	hist, _ := raw.Lookup("history").ArrayOK()
	entries, _ := hist.Values()
	if len(entries) != 1 {
		t.Fatalf("retried task: %d history entries, want 1: %s", len(entries), raw)
	}
	first := usageOf(t, "retried task's history entry", entries[0].Document())
	last := usageOf(t, "retried task", raw)
	t.Logf("retried task: first run %+v, second %+v", first, last)
	if first.PeakRSSMB < 350 || last.PeakRSSMB >= 250 || !last.At.After(first.At) {
		t.Errorf("retried task: first run %+v, second run %+v; want the first at about 400 MB, the second its own, under 250", first, last)
	}

	var live queue.Usage
	dentest.Eventually(t, time.Minute, "usage of the long task while it runs", func() bool {
		raw := dentest.Task(t, db, long)
		if status(t, db, long) != queue.StatusRunning {
			return false
		}
		var ok bool
		live, ok = queue.UsageOf(raw)
		return ok && live.Running
	})
	if live.WallS <= 0 || live.Samples < 1 {
		t.Errorf("long task while running: %+v", live)
	}
	dentest.Eventually(t, time.Minute, "a second update of the long task", func() bool {
		u, ok := queue.UsageOf(dentest.Task(t, db, long))
		return ok && u.At.After(live.At)
	})
	touch(t, stopLong)
	raw = dentest.WaitStatus(t, db, long, 1)
	if u := usageOf(t, "long task", raw); u.Running || u.WallS < live.WallS {
		t.Errorf("long task: final usage %+v after %+v while running", u, live)
	}

	raw = dentest.WaitStatus(t, db, short, 1)
	if u := usageOf(t, "short task", raw); u.Running || u.WallS <= 0 || u.PeakRSSMB <= 0 {
		t.Errorf("short task: usage %+v", u)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
