package queue_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// taskOf decodes a task document with the fields given after the ones
// every task has.
func taskOf(t *testing.T, id bson.ObjectID, fields ...bson.E) queue.Task {
	t.Helper()
	doc := append(bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: bson.NewObjectID()}}, fields...)
	task, err := queue.DecodeTask(mustRaw(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// A plugin decodes its task's parameters into a struct or a map; a
// parameter of the wrong type is an error that names the task.
func TestDecodeParameters(t *testing.T) {
	t.Parallel()
	id := bson.NewObjectID()
	task := taskOf(t, id, bson.E{Key: "status", Value: queue.StatusQueued}, bson.E{Key: "node", Value: queue.Unclaimed},
		bson.E{Key: "parameters", Value: bson.D{{Key: "n", Value: int32(3)}, {Key: "name", Value: "x"}}})
	var p struct {
		N    int    `bson:"n"`
		Name string `bson:"name"`
	}
	if err := task.DecodeParameters(&p); err != nil || p.N != 3 || p.Name != "x" {
		t.Fatalf("into a struct: %+v, %v", p, err)
	}
	m := map[string]any{}
	if err := task.DecodeParameters(&m); err != nil || m["name"] != "x" || len(m) != 2 {
		t.Fatalf("into a map: %v, %v", m, err)
	}
	var wrong struct {
		Name int `bson:"name"`
	}
	err := task.DecodeParameters(&wrong)
	if err == nil || !strings.Contains(err.Error(), "decode parameters of task "+id.Hex()) {
		t.Fatalf("a string into an int: %v, want an error naming task %s", err, id.Hex())
	}
}

// A task's stdout or stderr that is neither text nor a GridFS file id is
// the document's fault: Output's error is ErrOutputType and says which
// stream holds what; a missing or null one is ErrNoOutput, not that.
func TestOutputOfTheWrongType(t *testing.T) {
	t.Parallel()
	task := taskOf(t, bson.NewObjectID(), bson.E{Key: "status", Value: queue.StatusSucceeded},
		bson.E{Key: queue.StreamStdout, Value: int32(7)}, bson.E{Key: queue.StreamStderr, Value: nil})
	_, _, err := task.Output(queue.StreamStdout)
	if !errors.Is(err, queue.ErrOutputType) || errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("stdout 7: %v, want ErrOutputType", err)
	}
	if want := "stdout is 32-bit integer, neither a string nor a GridFS file id"; err.Error() != want {
		t.Fatalf("stdout 7: %q, want %q", err, want)
	}
	if _, _, err := task.Output(queue.StreamStderr); !errors.Is(err, queue.ErrNoOutput) || errors.Is(err, queue.ErrOutputType) {
		t.Fatalf("stderr null: %v, want ErrNoOutput only", err)
	}
}

// The sweep's unfit step sees a task as queued only when its status is
// -2 and no node holds it, its own request when it has one (Bad when it
// cannot be read), and the note it carries.
func TestUnfitCandidateOf(t *testing.T) {
	t.Parallel()
	id := bson.NewObjectID()
	request := bson.E{Key: queue.FieldRequested, Value: bson.D{{Key: queue.FieldMemoryMB, Value: int32(2048)}, {Key: queue.FieldCPUs, Value: 1.5}}}
	for _, tc := range []struct {
		name   string
		fields []bson.E
		want   queue.UnfitCandidate
	}{
		{"queued, no request", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}},
			queue.UnfitCandidate{Queued: true}},
		{"queued, no node field", []bson.E{{Key: "status", Value: queue.StatusQueued}},
			queue.UnfitCandidate{Queued: true}},
		{"queued, node -1 as a double", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: -1.0}}, // as the mongo shell writes it
			queue.UnfitCandidate{Queued: true}},
		{"queued with a request and a note", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}, request,
			{Key: queue.FieldUnfit, Value: "requests 2048 MiB"}},
			queue.UnfitCandidate{Queued: true, Requested: &queue.Resources{MemoryMB: 2048, CPUs: 1.5}, Unfit: "requests 2048 MiB"}},
		{"status -2 but held by a node", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: "a"}, request},
			queue.UnfitCandidate{Requested: &queue.Resources{MemoryMB: 2048, CPUs: 1.5}}},
		{"claimed", []bson.E{{Key: "status", Value: queue.StatusClaimed}, {Key: "node", Value: "a"}},
			queue.UnfitCandidate{}},
		{"an unreadable request", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed},
			{Key: queue.FieldRequested, Value: "lots"}},
			queue.UnfitCandidate{Queued: true, Bad: true}},
		{"a note that is not text", []bson.E{{Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed},
			{Key: queue.FieldUnfit, Value: int32(1)}},
			queue.UnfitCandidate{Queued: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task := taskOf(t, id, tc.fields...)
			got := queue.UnfitCandidateOf(task)
			want := tc.want
			want.ID, want.Queue = id, task.Queue
			if got.ID != want.ID || got.Queue != want.Queue || got.Queued != want.Queued || got.Bad != want.Bad || got.Unfit != want.Unfit ||
				(got.Requested == nil) != (want.Requested == nil) || (got.Requested != nil && *got.Requested != *want.Requested) {
				t.Fatalf("UnfitCandidateOf = %+v (requested %v), want %+v (requested %v)", got, got.Requested, want, want.Requested)
			}
		})
	}
}

// The unfit note is written only over the note the sweep read (none: no
// string there), and only on a task still queued; removing it needs the
// same. Each call says whether it changed the task, and none touches
// mtime.
func TestSetUnfitWritesOverWhatItRead(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, queue.SortFIFO)
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{})
	queued, claimed, odd := ids[0], ids[1], ids[2]
	dentest.Claim(t, db, claimed, "a")
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: odd}}, bson.D{{Key: "$set", Value: bson.D{{Key: queue.FieldUnfit, Value: int32(1)}}}})
	mtime := dentest.Task(t, db, queued).Lookup("mtime")

	note := func(id bson.ObjectID) bson.RawValue { return dentest.Task(t, db, id).Lookup(queue.FieldUnfit) }
	for _, step := range []struct {
		name        string
		id          bson.ObjectID
		was, reason string
		changed     bool
		after       string // the note then ("": none)
	}{
		{"a note on a queued task", queued, "", "too big", true, "too big"},
		{"again, as if none were there", queued, "", "other", false, "too big"},
		{"over another note than read", queued, "not this", "other", false, "too big"},
		{"over the note read", queued, "too big", "smaller", true, "smaller"},
		{"removed, over another note", queued, "too big", "", false, "smaller"},
		{"removed, over the note read", queued, "smaller", "", true, ""},
		{"a note on a claimed task", claimed, "", "too big", false, ""},
		{"a note over one that is not text", odd, "", "too big", true, "too big"},
	} {
		changed, err := s.SetUnfit(ctx, step.id, step.was, step.reason)
		if err != nil || changed != step.changed {
			t.Fatalf("%s: SetUnfit = %v, %v; want %v", step.name, changed, err, step.changed)
		}
		got, _ := note(step.id).StringValueOK()
		if got != step.after {
			t.Fatalf("%s: the note is %q, want %q", step.name, got, step.after)
		}
	}
	if v := note(queued); v.Type != 0 {
		t.Errorf("a removed note left %s, want no field", v)
	}
	if got := dentest.Task(t, db, queued).Lookup("mtime"); !got.Equal(mtime) {
		t.Errorf("mtime %s after the notes, want %s as before", got, mtime)
	}
}
