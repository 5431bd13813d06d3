package queue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	// Zone data in the binary: a schedule's tz must not depend on the
	// host having tzdata installed.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Schedules: a document in the schedules collection makes den insert a
// task into a queue at the times it names (a cron expression in a time
// zone, or an interval), so that no cron outside den is needed. Fields
// (all den's own; a Perl Disbatch node never reads the collection):
//
//   - _id: the schedule's name.
//   - queue: the queue's ObjectId; parameters: the task's parameters
//     document; task: other fields of the task to insert (timeout,
//     max_retries, requested_resources, ...), optional.
//   - cron (five fields, or six with seconds first; @daily and kin) with
//     tz (an IANA zone; default UTC), or every (seconds).
//   - missed: what to do with times that passed while no node fired them
//     (a time is missed when a later one has come too, or when it is more
//     than MissedAfter late): skip (default: fire only a time that is not
//     missed), once (fire the latest of them, however late), each (fire
//     every one, at most maxFiresPerSchedule per call). overlap: skip (default: no new task
//     while the last one has not ended) or allow.
//   - paused: true stops it; resuming starts from the next time after now.
//   - next: the next time to fire; last: {at, task, skipped, fired} of the
//     last time fired or skipped; last_task: the last task it inserted
//     (what overlap looks at); problem: why den cannot fire it.
//
// Exactly one task per scheduled time, across any number of nodes: the
// task's _id is derived from the schedule's name and the time (its first
// four bytes are the time, as in any ObjectId), so inserting it twice
// fails on the duplicate key; and next moves on only by an update
// conditional on the next it was read with. A node that inserts the task
// and dies before moving next on leaves the next node to find the task
// there and move on: no run is missing, none doubled.
//
// Cron times are wall-clock times in the zone: each happens once. A time
// that does not exist (the hour skipped in spring) fires an hour later, as
// the zone normalizes it; a time that exists twice (the hour repeated in
// autumn) fires once, at its first occurrence. A schedule that fires every
// few minutes by cron therefore pauses for the repeated hour; every
// (an interval of real time) does not.
const (
	SchedulesCollection = "schedules"

	MissedSkip = "skip"
	MissedOnce = "once"
	MissedEach = "each"

	OverlapSkip  = "skip"
	OverlapAllow = "allow"
)

// MissedAfter is how late a scheduled time may fire and still not count
// as missed.
const MissedAfter = time.Minute

// maxFiresPerSchedule bounds the tasks one FireDue call inserts for one
// schedule (missed: each, after a long stop): the rest are fired by the
// next calls.
const maxFiresPerSchedule = 100

// cronParser reads five fields, or six with seconds first, and the
// descriptors (@daily, @hourly, @every is refused: use every).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduleSpec is what a schedule says; Schedule is the document.
type ScheduleSpec struct {
	Name       string
	Queue      bson.ObjectID
	Parameters bson.Raw
	// Task holds other fields of the task to insert; nil: none.
	Task    bson.Raw
	Cron    string
	TZ      string
	Every   time.Duration
	Missed  string
	Overlap string
}

// Schedule is a schedule document as read.
type Schedule struct {
	ScheduleSpec
	Paused bool
	Next   time.Time
	Last   *ScheduleRun
	// LastTask is the last task it inserted; zero: none yet.
	LastTask bson.ObjectID
	Problem  string
	Raw      bson.Raw
}

// ScheduleRun is a time a schedule fired, or skipped.
type ScheduleRun struct {
	At    time.Time     `bson:"at"`
	Task  bson.ObjectID `bson:"task,omitempty"`
	Fired time.Time     `bson:"fired"`
	// Skipped says why no task was inserted: missed, overlap.
	Skipped string `bson:"skipped,omitempty"`
}

// timing is a schedule's times: a cron expression in a zone, or an
// interval.
type timing struct {
	sched cron.Schedule // in UTC, evaluated on wall-clock times
	loc   *time.Location
	every time.Duration
}

// timing checks the spec's times and returns them.
func (s ScheduleSpec) timing() (timing, error) {
	switch {
	case s.Every < 0:
		return timing{}, fmt.Errorf("every %s: an interval must be positive (at least a second)", s.Every)
	case s.Cron != "" && s.Every > 0:
		return timing{}, errors.New("give cron or every, not both")
	case s.Every > 0:
		if s.Every < time.Second {
			return timing{}, fmt.Errorf("every %s: at least a second", s.Every)
		}
		if s.TZ != "" {
			return timing{}, errors.New("tz goes with cron, not every")
		}
		return timing{every: s.Every}, nil
	case s.Cron == "":
		return timing{}, errors.New("give cron (an expression) or every (an interval)")
	}
	loc := time.UTC
	if s.TZ != "" {
		var err error
		if loc, err = time.LoadLocation(s.TZ); err != nil {
			return timing{}, fmt.Errorf("tz %q: %w", s.TZ, err)
		}
	}
	sched, err := cronParser.Parse(s.Cron)
	if err != nil {
		return timing{}, fmt.Errorf("cron %q: %w", s.Cron, err)
	}
	if _, ok := sched.(cron.ConstantDelaySchedule); ok {
		return timing{}, fmt.Errorf("cron %q: use every for an interval", s.Cron)
	}
	return timing{sched: sched, loc: loc}, nil
}

// after is the first time strictly after t; zero when there is none.
func (tm timing) after(t time.Time) time.Time {
	if tm.every > 0 {
		return t.Add(tm.every)
	}
	// The expression is evaluated on wall-clock times (a UTC time whose
	// fields are the zone's), each mapped back to the instant it names.
	lt := t.In(tm.loc)
	w := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
	for range 10000 {
		w = tm.sched.Next(w)
		if w.IsZero() {
			return w
		}
		at := inZone(w, tm.loc)
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// inZone is the instant a wall-clock time w (its fields) names in loc: the
// first of two where the zone repeats the time (autumn), an hour later
// where the zone skips it (spring), as time.Date normalizes it.
func inZone(w time.Time, loc *time.Location) time.Time {
	at := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	_, before := at.Add(-3 * time.Hour).Zone()
	_, now := at.Zone()
	if before > now {
		earlier := at.Add(-time.Duration(before-now) * time.Second)
		if e := earlier.In(loc); e.Hour() == w.Hour() && e.Minute() == w.Minute() && e.Second() == w.Second() && e.Day() == w.Day() {
			return earlier
		}
	}
	return at
}

// Validate checks a spec as AddSchedule does, but for the queue.
func (s ScheduleSpec) Validate() error {
	if s.Name == "" {
		return errors.New("a schedule needs a name")
	}
	if _, err := s.timing(); err != nil {
		return err
	}
	if !slices.Contains([]string{"", MissedSkip, MissedOnce, MissedEach}, s.Missed) {
		return fmt.Errorf("missed %q: want skip, once or each", s.Missed)
	}
	if !slices.Contains([]string{"", OverlapSkip, OverlapAllow}, s.Overlap) {
		return fmt.Errorf("overlap %q: want skip or allow", s.Overlap)
	}
	if s.Parameters != nil {
		if err := s.Parameters.Validate(); err != nil {
			return fmt.Errorf("parameters: %w", err)
		}
	}
	if s.Task != nil {
		if err := s.Task.Validate(); err != nil {
			return fmt.Errorf("task: %w", err)
		}
		for _, key := range []string{"_id", "queue", "status", "node", "parameters", "ctime", "mtime", "stdout", "stderr"} {
			if s.Task.Lookup(key).Type != 0 {
				return fmt.Errorf("task: %s is den's to set", key)
			}
		}
	}
	// The task it would insert must be one a node runs.
	doc := s.taskDoc(bson.NewObjectID(), time.Now())
	raw, err := bson.Marshal(doc)
	if err != nil {
		return fmt.Errorf("task: %w", err)
	}
	if t, err := DecodeTask(raw); err != nil {
		return fmt.Errorf("task: %w", err)
	} else if len(t.Problems) > 0 {
		return fmt.Errorf("task: %v", t.Problems)
	}
	return nil
}

// taskDoc is the task a schedule inserts.
func (s ScheduleSpec) taskDoc(id bson.ObjectID, now time.Time) bson.D {
	params := s.Parameters
	if params == nil {
		params, _ = bson.Marshal(bson.D{})
	}
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: s.Queue},
		{Key: "status", Value: StatusQueued}, {Key: "node", Value: Unclaimed},
		{Key: "parameters", Value: params}, {Key: "ctime", Value: now}, {Key: "mtime", Value: now},
		{Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
	}
	if s.Task != nil {
		elems, _ := s.Task.Elements()
		for _, e := range elems {
			doc = append(doc, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return append(doc, bson.E{Key: "schedule", Value: s.Name})
}

// scheduledTaskID is the _id of the task a schedule inserts for time at:
// the time's seconds, then 8 bytes of a hash of the name and the time.
func scheduledTaskID(name string, at time.Time) bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(at.Unix()))
	h := sha256.Sum256([]byte(name + "\x00" + at.UTC().Format(time.RFC3339Nano)))
	copy(id[4:], h[:8])
	return id
}

// AddSchedule inserts a schedule; its first time is the first after now.
// A schedule of that name already there is an error.
func (s *Store) AddSchedule(ctx context.Context, spec ScheduleSpec, now time.Time) (Schedule, error) {
	if spec.Missed == "" {
		spec.Missed = MissedSkip
	}
	if spec.Overlap == "" {
		spec.Overlap = OverlapSkip
	}
	if err := spec.Validate(); err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %w", spec.Name, err)
	}
	tm, _ := spec.timing()
	next := tm.after(now)
	if next.IsZero() {
		return Schedule{}, fmt.Errorf("schedule %q: %s never fires", spec.Name, spec.Cron)
	}
	doc := bson.D{{Key: "_id", Value: spec.Name}, {Key: "queue", Value: spec.Queue}, {Key: "parameters", Value: spec.Parameters}}
	if spec.Parameters == nil {
		doc[2].Value = bson.D{}
	}
	if spec.Task != nil {
		doc = append(doc, bson.E{Key: "task", Value: spec.Task})
	}
	if spec.Cron != "" {
		doc = append(doc, bson.E{Key: "cron", Value: spec.Cron}, bson.E{Key: "tz", Value: tm.loc.String()})
	} else {
		doc = append(doc, bson.E{Key: "every", Value: spec.Every.Seconds()})
	}
	doc = append(doc, bson.E{Key: "missed", Value: spec.Missed}, bson.E{Key: "overlap", Value: spec.Overlap},
		bson.E{Key: "paused", Value: false}, bson.E{Key: "next", Value: next}, bson.E{Key: "ctime", Value: now}, bson.E{Key: "mtime", Value: now})
	if _, err := s.db.Collection(SchedulesCollection).InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return Schedule{}, fmt.Errorf("schedule %q exists already", spec.Name)
		}
		return Schedule{}, fmt.Errorf("add schedule %q: %w", spec.Name, err)
	}
	sc, err := s.Schedule(ctx, spec.Name)
	if err != nil || sc == nil {
		return Schedule{}, fmt.Errorf("read schedule %q back: %v", spec.Name, err)
	}
	return *sc, nil
}

// decodeSchedule reads a schedule document; what it cannot read is its
// Problem.
func decodeSchedule(raw bson.Raw) Schedule {
	sc := Schedule{Raw: raw}
	var problems []string
	if name, ok := raw.Lookup("_id").StringValueOK(); ok {
		sc.Name = name
	} else {
		sc.Name = raw.Lookup("_id").String()
		problems = append(problems, "its _id (the name) is not a string")
	}
	var ok bool
	if sc.Queue, ok = raw.Lookup("queue").ObjectIDOK(); !ok {
		problems = append(problems, "queue is not an ObjectId")
	}
	if v := raw.Lookup("parameters"); !absent(v) {
		if sc.Parameters, ok = v.DocumentOK(); !ok {
			problems = append(problems, "parameters is not a document")
		}
	}
	if v := raw.Lookup("task"); !absent(v) {
		if sc.Task, ok = v.DocumentOK(); !ok {
			problems = append(problems, "task is not a document")
		}
	}
	sc.Cron, _ = raw.Lookup("cron").StringValueOK()
	sc.TZ, _ = raw.Lookup("tz").StringValueOK()
	if f, ok := raw.Lookup("every").AsFloat64OK(); ok && f > 0 && f < 1e10 {
		sc.Every = time.Duration(f * float64(time.Second))
	} else if ok && f <= 0 && sc.Cron == "" {
		// Said here, not as "give cron or every": every is given, wrong.
		problems = append(problems, fmt.Sprintf("every %v: an interval must be a positive number of seconds (at least 1)", f))
	}
	sc.Missed, _ = raw.Lookup("missed").StringValueOK()
	sc.Overlap, _ = raw.Lookup("overlap").StringValueOK()
	sc.Paused, _ = raw.Lookup("paused").BooleanOK()
	sc.Next, _ = timeValue(raw.Lookup("next"))
	sc.LastTask, _ = raw.Lookup("last_task").ObjectIDOK()
	if doc, ok := raw.Lookup("last").DocumentOK(); ok {
		var last ScheduleRun
		if bson.Unmarshal(doc, &last) == nil {
			sc.Last = &last
		}
	}
	if len(problems) == 0 {
		if err := sc.ScheduleSpec.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		sc.Problem = strings.Join(problems, "; ")
	}
	return sc
}

// Schedules returns every schedule, by name.
func (s *Store) Schedules(ctx context.Context) ([]Schedule, error) {
	return s.findSchedules(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
}

func (s *Store) findSchedules(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]Schedule, error) {
	cur, err := s.db.Collection(SchedulesCollection).Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	defer cur.Close(ctx)
	var out []Schedule
	for cur.Next(ctx) {
		out = append(out, decodeSchedule(append(bson.Raw(nil), cur.Current...)))
	}
	if err := cur.Err(); err != nil {
		return out, fmt.Errorf("read schedules: %w", err)
	}
	return out, nil
}

// Schedule reads one schedule by name; nil when there is none.
func (s *Store) Schedule(ctx context.Context, name string) (*Schedule, error) {
	raw, err := s.db.Collection(SchedulesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schedule %q: %w", name, err)
	}
	sc := decodeSchedule(raw)
	return &sc, nil
}

// PauseSchedule pauses (or resumes) a schedule; false when there is none.
// Resuming starts from the first time after now: the times passed while
// it was paused are not runs.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, now time.Time) (bool, error) {
	set := bson.D{{Key: "paused", Value: paused}, {Key: "mtime", Value: now}}
	if !paused {
		sc, err := s.Schedule(ctx, name)
		if err != nil || sc == nil {
			return false, err
		}
		tm, err := sc.timing()
		if err != nil {
			return false, fmt.Errorf("resume schedule %q: %w", name, err)
		}
		set = append(set, bson.E{Key: "next", Value: tm.after(now)})
	}
	res, err := s.db.Collection(SchedulesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: name}}, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return false, fmt.Errorf("pause schedule %q: %w", name, err)
	}
	return res.MatchedCount == 1, nil
}

// DeleteSchedule deletes a schedule; false when there is none. The tasks
// it inserted stay.
func (s *Store) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	res, err := s.db.Collection(SchedulesCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: name}})
	if err != nil {
		return false, fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return res.DeletedCount == 1, nil
}

// Fired is what one FireDue call did.
type Fired struct {
	Inserted []bson.ObjectID
	Skipped  int
	// Problems maps each schedule den cannot fire to why.
	Problems map[string]string
	// Next is the earliest next time after now of the schedules that are
	// not paused; zero when there is none.
	Next time.Time
}

// FireDue inserts the tasks of every schedule whose next time has come,
// by its missed and overlap rules, and moves each schedule's next on. Any
// number of nodes may call it at once. It also returns the earliest next
// time, for the caller to know when to call again.
func (s *Store) FireDue(ctx context.Context, now time.Time) (Fired, error) {
	fired := Fired{Problems: map[string]string{}}
	// Due: next has come, or is not a date (a schedule written by hand
	// without one gets its first).
	due, err := s.findSchedules(ctx, bson.D{{Key: "paused", Value: bson.D{{Key: "$ne", Value: true}}}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "next", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "next", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}},
	}}}, options.Find().SetSort(bson.D{{Key: "next", Value: 1}}).SetLimit(100))
	if err != nil {
		return fired, err
	}
	for _, sc := range due {
		if sc.Problem != "" {
			fired.Problems[sc.Name] = sc.Problem
			s.noteScheduleProblem(ctx, sc)
			continue
		}
		if err := s.fire(ctx, sc, now, &fired); err != nil {
			return fired, fmt.Errorf("fire schedule %q: %w", sc.Name, err)
		}
	}
	next, err := s.findSchedules(ctx, bson.D{{Key: "paused", Value: bson.D{{Key: "$ne", Value: true}}},
		{Key: "next", Value: bson.D{{Key: "$gt", Value: now}}}},
		options.Find().SetSort(bson.D{{Key: "next", Value: 1}}).SetLimit(1).SetProjection(bson.D{{Key: "next", Value: 1}}))
	if err != nil {
		return fired, err
	}
	if len(next) > 0 {
		fired.Next = next[0].Next
	}
	return fired, nil
}

// noteScheduleProblem writes why a schedule cannot fire into it, once
// (for people: den schedule list, the page; what den reads is the
// schedule itself).
func (s *Store) noteScheduleProblem(ctx context.Context, sc Schedule) {
	if p, _ := sc.Raw.Lookup("problem").StringValueOK(); p == sc.Problem {
		return
	}
	s.db.Collection(SchedulesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: sc.Raw.Lookup("_id")}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "problem", Value: sc.Problem}}}})
}

// fire fires one due schedule, time after time, until its next is in the
// future, another node moved it on, or maxFiresPerSchedule.
func (s *Store) fire(ctx context.Context, sc Schedule, now time.Time, fired *Fired) error {
	tm, _ := sc.timing()
	at := sc.Next
	lastTask := sc.LastTask
	if p := sc.Raw.Lookup("problem"); p.Type != 0 && !sc.Paused {
		// Fixed since: the note goes.
		s.db.Collection(SchedulesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: sc.Name}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "problem", Value: ""}}}})
	}
	if at.IsZero() {
		// Written without a next time: its first is the first after now.
		filter := bson.D{{Key: "_id", Value: sc.Name}, {Key: "next", Value: bson.D{{Key: "$exists", Value: false}}}}
		if v := sc.Raw.Lookup("next"); v.Type != 0 {
			filter[1].Value = v
		}
		_, err := s.db.Collection(SchedulesCollection).UpdateOne(ctx, filter,
			bson.D{{Key: "$set", Value: bson.D{{Key: "next", Value: tm.after(now)}}}})
		if err != nil {
			return fmt.Errorf("set its first time: %w", err)
		}
		return nil
	}
	for range maxFiresPerSchedule {
		if at.IsZero() || at.After(now) {
			return nil
		}
		next := tm.after(at)
		run := ScheduleRun{At: at, Fired: now}
		// A time is missed when a later one has come too, or when it is
		// more than MissedAfter late.
		latest := next.IsZero() || next.After(now)
		insert := true
		switch sc.Missed {
		case MissedEach:
		case MissedOnce:
			insert = latest
		default:
			insert = latest && now.Sub(at) <= MissedAfter
		}
		if !insert {
			run.Skipped = "missed"
		}
		if insert && sc.Overlap != OverlapAllow && !lastTask.IsZero() {
			busy, err := s.notEnded(ctx, lastTask)
			if err != nil {
				return err
			}
			if busy {
				insert, run.Skipped = false, "overlap"
			}
		}
		if insert {
			id := scheduledTaskID(sc.Name, at)
			if _, err := s.tasks.InsertOne(ctx, sc.taskDoc(id, now)); err == nil {
				fired.Inserted = append(fired.Inserted, id)
				if _, err := s.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: sc.Queue}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}, {Key: "count_total", Value: 1}}}}); err != nil {
					return fmt.Errorf("count the scheduled task %s in its queue: %w (run den counts fix)", id.Hex(), err)
				}
			} else if !mongo.IsDuplicateKeyError(err) {
				return fmt.Errorf("insert the task for %s: %w", at.UTC().Format(time.RFC3339), err)
			}
			run.Task = id
		} else {
			fired.Skipped++
		}
		set := bson.D{{Key: "last", Value: run}, {Key: "mtime", Value: now}}
		if !run.Task.IsZero() {
			set = append(set, bson.E{Key: "last_task", Value: run.Task})
		}
		if next.IsZero() {
			set = append(set, bson.E{Key: "paused", Value: true}, bson.E{Key: "problem", Value: "its times have run out"})
		} else {
			set = append(set, bson.E{Key: "next", Value: next})
		}
		res, err := s.db.Collection(SchedulesCollection).UpdateOne(ctx,
			bson.D{{Key: "_id", Value: sc.Name}, {Key: "next", Value: at}, {Key: "paused", Value: bson.D{{Key: "$ne", Value: true}}}},
			bson.D{{Key: "$set", Value: set}})
		if err != nil {
			return fmt.Errorf("move next on from %s: %w", at.UTC().Format(time.RFC3339), err)
		}
		if res.MatchedCount == 0 {
			return nil // another node moved it on (or it was paused or changed)
		}
		if !run.Task.IsZero() {
			lastTask = run.Task
		}
		at = next
	}
	return nil
}

// notEnded reports whether a task is still queued, claimed, running or
// held (not finished, cancelled or orphaned). A task that is gone has
// ended.
func (s *Store) notEnded(ctx context.Context, id bson.ObjectID) (bool, error) {
	st, err := s.Statuses(ctx, []bson.ObjectID{id})
	if err != nil {
		return false, err
	}
	v, ok := st[id]
	if !ok {
		return false, nil
	}
	return v <= StatusRunning && v != StatusCancelled && v != StatusOrphaned, nil
}
