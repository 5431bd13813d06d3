package queue_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A cron time is a wall-clock time in its zone and happens once a day
// across both daylight-saving changes: 02:30 on the spring day (which
// Berlin skips) fires at 03:30, and on the autumn day (which Berlin has
// twice) fires once.
func TestScheduleTimesAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		from  time.Time
		times []string // UTC
	}{
		{"spring", time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), []string{
			"2026-03-28T01:30:00Z", // 02:30 CET
			"2026-03-29T01:30:00Z", // 02:30 does not exist: 03:30 CEST
			"2026-03-30T00:30:00Z", // 02:30 CEST
		}},
		{"autumn", time.Date(2026, 10, 23, 12, 0, 0, 0, berlin), []string{
			"2026-10-24T00:30:00Z", // 02:30 CEST
			"2026-10-25T00:30:00Z", // 02:30 happens twice: once, the first
			"2026-10-26T01:30:00Z", // 02:30 CET
		}},
	} {
		sc, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "nightly-" + tc.name, Queue: qid, Cron: "30 2 * * *", TZ: "Europe/Berlin", Overlap: queue.OverlapAllow, Missed: queue.MissedEach}, tc.from)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		at := sc.Next
		for range tc.times {
			got = append(got, at.UTC().Format(time.RFC3339))
			// Fire it, a second late, and read the next time it set.
			if _, err := s.FireDue(dentest.Context(t), at.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			sc2, err := s.Schedule(dentest.Context(t), sc.Name)
			if err != nil || sc2 == nil {
				t.Fatal(err)
			}
			at = sc2.Next
		}
		if strings.Join(got, " ") != strings.Join(tc.times, " ") {
			t.Errorf("%s: fired at %v, want %v", tc.name, got, tc.times)
		}
		if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: sc.Name}}); n != int64(len(tc.times)) {
			t.Errorf("%s: %d tasks, want %d", tc.name, n, len(tc.times))
		}
	}
}

// Three nodes firing at once over many ticks insert exactly one task per
// scheduled time; the counts follow.
func TestScheduleFiresOncePerTimeAcrossNodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := []*queue.Store{queue.NewStore(db), queue.NewStore(db), queue.NewStore(db)}
	if _, err := nodes[0].AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "every-second", Queue: qid, Every: time.Second,
		Overlap: queue.OverlapAllow, Parameters: mustRaw(t, bson.D{{Key: "x", Value: 1}})}, t0); err != nil {
		t.Fatal(err)
	}
	const ticks = 30
	for i := 1; i <= ticks; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		var wg sync.WaitGroup
		for _, s := range nodes {
			wg.Go(func() {
				if _, err := s.FireDue(dentest.Context(t), now); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "every-second"}}); n != ticks {
		t.Fatalf("%d tasks for %d scheduled times", n, ticks)
	}
	task := dentest.Task(t, db, firstScheduled(t, db))
	if task.Lookup("parameters", "x").AsInt64() != 1 || task.Lookup("status").AsInt64() != -2 || task.Lookup("node").AsInt64() != -1 {
		t.Errorf("scheduled task: %s", task)
	}
	drift, err := nodes[0].CheckCounts(dentest.Context(t))
	if err != nil || len(drift) != 1 || drift[0].Drifted() || drift[0].Total != ticks {
		t.Errorf("counts after scheduling: %+v %v", drift, err)
	}
}

func firstScheduled(t *testing.T, db *mongo.Database) bson.ObjectID {
	t.Helper()
	raw, err := db.Collection("tasks").FindOne(dentest.Context(t), bson.D{{Key: "schedule", Value: bson.D{{Key: "$exists", Value: true}}}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return raw.Lookup("_id").ObjectID()
}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Times missed while no node was up: skip fires none of them, once the
// latest, each every one. A node that inserted a time's task and died
// before moving the schedule on leaves neither a missing nor a doubled
// run.
func TestScheduleMissedTimes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Every 100 s; the nodes come back 90 s after the tenth time.
	back := t0.Add(1090 * time.Second)
	for _, tc := range []struct {
		missed string
		want   int64
	}{{queue.MissedSkip, 0}, {queue.MissedOnce, 1}, {queue.MissedEach, 10}} {
		name := "missed-" + tc.missed
		if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: name, Queue: qid, Every: 100 * time.Second, Missed: tc.missed, Overlap: queue.OverlapAllow}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FireDue(dentest.Context(t), back); err != nil {
			t.Fatal(err)
		}
		if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: name}}); n != tc.want {
			t.Errorf("missed %s: %d tasks, want %d", tc.missed, n, tc.want)
		}
		sc, _ := s.Schedule(dentest.Context(t), name)
		if want := t0.Add(1100 * time.Second); !sc.Next.Equal(want) {
			t.Errorf("missed %s: next %v, want %v", tc.missed, sc.Next, want)
		}
	}
	// Each time on time: skip fires it.
	if _, err := s.FireDue(dentest.Context(t), t0.Add(1101*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "missed-skip"}}); n != 1 {
		t.Errorf("skip, on time: %d tasks, want 1", n)
	}

	// The task of 1200 s is there already (its node died before it moved
	// next on): firing finds it, inserts no second, and moves on.
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "crash", Queue: qid, Every: 100 * time.Second, Overlap: queue.OverlapAllow}, t0.Add(1100*time.Second)); err != nil {
		t.Fatal(err)
	}
	s2 := queue.NewStore(db)
	if _, err := s2.FireDue(dentest.Context(t), t0.Add(1201*time.Second)); err != nil {
		t.Fatal(err)
	}
	id := firstOf(t, db, "crash")
	// Undo the move on, as if the node had died before it.
	dentest.Update(t, db.Collection("schedules"), bson.D{{Key: "_id", Value: "crash"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "next", Value: t0.Add(1200 * time.Second)}}}})
	if _, err := s.FireDue(dentest.Context(t), t0.Add(1202*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "crash"}}); n != 1 {
		t.Errorf("a time fired again after a crash: %d tasks, want 1", n)
	}
	if sc, _ := s.Schedule(dentest.Context(t), "crash"); !sc.Next.Equal(t0.Add(1300*time.Second)) || sc.LastTask != id {
		t.Errorf("after the crash: next %v, last task %v (want %v)", sc.Next, sc.LastTask, id)
	}
}

func firstOf(t *testing.T, db *mongo.Database, schedule string) bson.ObjectID {
	t.Helper()
	raw, err := db.Collection("tasks").FindOne(dentest.Context(t), bson.D{{Key: "schedule", Value: schedule}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return raw.Lookup("_id").ObjectID()
}

// With overlap skip, no task is inserted while the last one has not
// ended; paused, nothing is; resumed, it goes on from now.
func TestScheduleOverlapAndPause(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "o", Queue: qid, Every: 10 * time.Second}, t0); err != nil {
		t.Fatal(err)
	}
	fire := func(sec int) queue.Fired {
		t.Helper()
		f, err := s.FireDue(dentest.Context(t), t0.Add(time.Duration(sec)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	count := func() int64 { return dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "o"}}) }
	if f := fire(10); len(f.Inserted) != 1 || !f.Next.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("first time: %+v", f)
	}
	first := firstOf(t, db, "o")
	if f := fire(20); len(f.Inserted) != 0 || f.Skipped != 1 || count() != 1 {
		t.Fatalf("while the first is queued: %+v, %d tasks", f, count())
	}
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: first}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}}}})
	if f := fire(30); len(f.Inserted) != 1 || count() != 2 {
		t.Fatalf("after the first ended: %+v, %d tasks", f, count())
	}
	if ok, err := s.PauseSchedule(dentest.Context(t), "o", true, t0.Add(31*time.Second)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "schedule", Value: "o"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}}}})
	if f := fire(100); len(f.Inserted) != 0 || count() != 2 || !f.Next.IsZero() {
		t.Fatalf("paused: %+v, %d tasks", f, count())
	}
	if ok, err := s.PauseSchedule(dentest.Context(t), "o", false, t0.Add(105*time.Second)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if sc, _ := s.Schedule(dentest.Context(t), "o"); sc.Paused || !sc.Next.Equal(t0.Add(115*time.Second)) {
		t.Fatalf("resumed: paused %v, next %v", sc.Paused, sc.Next)
	}
}

// Bad input is refused with a clear error, whether given to AddSchedule
// or written into the collection by hand (then it is not fired, and says
// why in its problem field).
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	now := time.Now()
	for _, tc := range []struct {
		spec queue.ScheduleSpec
		say  string
	}{
		{queue.ScheduleSpec{Name: "a", Queue: qid, Cron: "61 * * * *"}, "above maximum"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Cron: "not cron"}, "cron"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Cron: "* * * * *", TZ: "Mars/Olympus"}, "unknown time zone"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Cron: "* * * * *", Every: time.Minute}, "not both"},
		{queue.ScheduleSpec{Name: "a", Queue: qid}, "give cron"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Every: time.Millisecond}, "at least a second"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Every: -time.Minute}, "every -1m0s: an interval must be positive"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Cron: "@every 1m"}, "use every"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Every: time.Minute, Missed: "sometimes"}, "missed"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Every: time.Minute, Task: mustRaw(t, bson.D{{Key: "status", Value: 1}})}, "den's to set"},
		{queue.ScheduleSpec{Name: "a", Queue: qid, Every: time.Minute, Task: mustRaw(t, bson.D{{Key: "timeout", Value: "soon"}})}, "timeout"},
		{queue.ScheduleSpec{Queue: qid, Every: time.Minute}, "needs a name"},
	} {
		_, err := s.AddSchedule(dentest.Context(t), tc.spec, now)
		if err == nil || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("%+v: %v, want an error saying %q", tc.spec, err, tc.say)
		}
	}
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "dup", Queue: qid, Every: time.Minute}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "dup", Queue: qid, Every: time.Minute}, now); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second schedule of the same name: %v", err)
	}
	// Written by hand: parameters not a document, a cron that cannot be read.
	dentest.Insert(t, db.Collection("schedules"),
		bson.D{{Key: "_id", Value: "by-hand"}, {Key: "queue", Value: qid}, {Key: "parameters", Value: "x"}, {Key: "every", Value: 60}, {Key: "next", Value: now.Add(-time.Second)}},
		bson.D{{Key: "_id", Value: "bad-cron"}, {Key: "queue", Value: qid}, {Key: "cron", Value: "99 * * * *"}, {Key: "next", Value: now.Add(-time.Second)}},
		bson.D{{Key: "_id", Value: "zero-every"}, {Key: "queue", Value: qid}, {Key: "every", Value: 0}, {Key: "next", Value: now.Add(-time.Second)}})
	f, err := s.FireDue(dentest.Context(t), now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.Problems["by-hand"], "parameters is not a document") || !strings.Contains(f.Problems["bad-cron"], "above maximum") ||
		!strings.Contains(f.Problems["zero-every"], "every 0: an interval must be a positive number of seconds") || len(f.Inserted) != 0 {
		t.Errorf("schedules written by hand: %+v", f)
	}
	if sc, _ := s.Schedule(dentest.Context(t), "by-hand"); !strings.Contains(sc.Raw.Lookup("problem").StringValue(), "parameters") {
		t.Errorf("the problem is not written into the schedule: %s", sc.Raw)
	}
}
