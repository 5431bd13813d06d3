package queue

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Task is a task document, decoded once: the protocol's fields and den's
// control fields. Plugins get one for the task they run; the node and the
// runner read tasks only through it.
type Task struct {
	ID    bson.ObjectID
	Queue bson.ObjectID
	// Parameters is the task's parameters document ("an object describing
	// the unique qualities of this task"). Use DecodeParameters or
	// Parameters.Lookup to read it.
	Parameters bson.Raw
	// Node is the node that claimed the task; empty when unclaimed (or not
	// a string).
	Node string
	// Status is the task's status code; StatusOK is false when it is
	// missing or not a whole number.
	Status   int
	StatusOK bool
	// Runner is the den task runner working on it, nil when none is
	// recorded.
	Runner *RunnerInfo
	// Ctime and Mtime are the creation and modification times, zero when
	// missing.
	Ctime time.Time
	Mtime time.Time
	// Cancel is den's cancel flag; StartAfter its start_after (zero: none).
	Cancel     bool
	StartAfter time.Time
	// Control holds the task's own control settings (its queue's apply
	// where the task sets none; see Options).
	Control Control
	// LiveUntil is when the last reader's request for live output runs
	// out (zero: none; SetLiveUntil). An odd value counts as none.
	LiveUntil time.Time
	// Attempts counts the runs that were retried; Timeouts those of them
	// that timed out.
	Attempts int
	Timeouts int
	// EndBefore is the task's deadline (zero: none).
	EndBefore time.Time
	// Unfit is why no node can run the task as it requests (see
	// resources.go); empty when nothing says so. It means something only
	// while the task is queued.
	Unfit string
	// Problems lists the fields that could not be decoded, each as "field
	// why". A task with problems is failed with them as the reason, never
	// run.
	Problems []string
	// Raw is the whole document as read.
	Raw bson.Raw

	// As stored, for updates conditional on the state read.
	nodeRaw, mtimeRaw bson.RawValue
}

// DecodeParameters decodes the parameters document into v, a pointer to a
// struct (with bson tags) or a map.
func (t *Task) DecodeParameters(v any) error {
	if err := bson.Unmarshal(t.Parameters, v); err != nil {
		return fmt.Errorf("decode parameters of task %s: %w", t.ID.Hex(), err)
	}
	return nil
}

// Param returns one parameter, and whether it is present.
func (t *Task) Param(name string) (bson.RawValue, bool) {
	v, err := t.Parameters.LookupErr(name)
	return v, err == nil
}

// DecodeTask reads a task document. It fails only when the document has
// no ObjectId _id; every other field that cannot be read is listed in
// Problems (and left at its zero value).
func DecodeTask(raw bson.Raw) (Task, error) {
	t := Task{Raw: raw}
	id, ok := raw.Lookup("_id").ObjectIDOK()
	if !ok {
		return t, fmt.Errorf("task _id is %s, not an ObjectId", describe(raw.Lookup("_id")))
	}
	t.ID = id
	q := raw.Lookup("queue")
	if t.Queue, ok = q.ObjectIDOK(); !ok {
		t.Problems = append(t.Problems, fmt.Sprintf("queue is %s; it must be the ObjectId of a queue", describe(q)))
	}
	// Disbatch 3.99x and the protocol write parameters; Disbatch 4.x writes
	// params. Either is accepted.
	p := raw.Lookup("parameters")
	if p.Type == 0 {
		if alt := raw.Lookup("params"); alt.Type != 0 {
			p = alt
		}
	}
	if t.Parameters, ok = p.DocumentOK(); !ok {
		t.Problems = append(t.Problems, fmt.Sprintf("parameters is %s; it must be an object (a document), e.g. parameters: {commands: \"*\"}", describe(p)))
	}
	t.nodeRaw = raw.Lookup("node")
	t.Node, _ = t.nodeRaw.StringValueOK()
	if st, ok := intValue(raw.Lookup("status")); ok && st >= math.MinInt32 && st <= math.MaxInt32 {
		t.Status, t.StatusOK = int(st), true
	}
	if doc, ok := raw.Lookup("runner").DocumentOK(); ok {
		var r RunnerInfo
		if bson.Unmarshal(doc, &r) == nil && !r.Token.IsZero() {
			t.Runner = &r
		}
	}
	if c, ok := timeValue(raw.Lookup("ctime")); ok {
		t.Ctime = c
	}
	t.mtimeRaw = raw.Lookup("mtime")
	if m, ok := timeValue(t.mtimeRaw); ok {
		t.Mtime = m
	}
	if v := raw.Lookup(FieldCancel); !absent(v) {
		c, err := DecodeBool(v)
		if err != nil {
			t.Problems = append(t.Problems, FieldCancel+" "+err.Error())
		}
		t.Cancel = c
	}
	if v := raw.Lookup(FieldStartAfter); !absent(v) {
		at, err := DecodeTime(v)
		if err != nil {
			t.Problems = append(t.Problems, FieldStartAfter+" "+err.Error())
		}
		t.StartAfter = at
	}
	t.LiveUntil, _ = timeValue(raw.Lookup(FieldLiveUntil))
	var problems []string
	t.Control, problems = DecodeControl(raw)
	t.Problems = append(t.Problems, problems...)
	if v := raw.Lookup(FieldAttempts); !absent(v) {
		n, err := DecodeCount(v)
		if err != nil {
			t.Problems = append(t.Problems, FieldAttempts+" "+err.Error())
		}
		t.Attempts = int(min(n, 1<<20))
	}
	if v := raw.Lookup(FieldTimeouts); !absent(v) {
		n, err := DecodeCount(v)
		if err != nil {
			t.Problems = append(t.Problems, FieldTimeouts+" "+err.Error())
		}
		t.Timeouts = int(min(n, 1<<20))
	}
	if v := raw.Lookup(FieldEndBefore); !absent(v) {
		at, err := DecodeTime(v)
		if err != nil {
			t.Problems = append(t.Problems, FieldEndBefore+" "+err.Error())
		}
		t.EndBefore = at
	}
	t.Unfit, _ = raw.Lookup(FieldUnfit).StringValueOK()
	return t, nil
}

// ParseTask reads a task document for a runner. It fails, with a reason a
// user can act on, when a field cannot be read (see Task.Problems); such a
// task is failed, never run.
func ParseTask(raw bson.Raw) (*Task, error) {
	t, err := DecodeTask(raw)
	if err != nil {
		return nil, err
	}
	if len(t.Problems) > 0 {
		return &t, errors.New(strings.Join(t.Problems, "; "))
	}
	return &t, nil
}

// ErrNoOutput is returned by Output for a task that has no such output yet.
var ErrNoOutput = errors.New("no output yet")

// ErrOutputType is what Output's error is (errors.Is) for a task whose
// stdout or stderr is neither text nor a GridFS file id: the document is
// at fault (someone wrote it so), not the database.
var ErrOutputType = errors.New("output of the wrong type")

// outputTypeError says which stream has which type; it is ErrOutputType.
type outputTypeError struct {
	stream string
	typ    bson.Type
}

func (e outputTypeError) Error() string {
	return fmt.Sprintf("%s is %s, neither a string nor a GridFS file id", e.stream, e.typ)
}

func (e outputTypeError) Is(target error) bool { return target == ErrOutputType }

// Output returns where a task's stdout or stderr (stream) is: the text,
// when it is stored in the task document, or the id of its tasks.files
// document (Disbatch's GridFS layout). It returns ErrNoOutput when the
// field is missing or null.
func (t Task) Output(stream string) (text string, file bson.ObjectID, err error) {
	v := t.Raw.Lookup(stream)
	switch v.Type {
	case bson.TypeString:
		return v.StringValue(), file, nil
	case bson.TypeObjectID:
		return "", v.ObjectID(), nil
	case bson.TypeNull, 0:
		return "", file, ErrNoOutput
	}
	return "", file, outputTypeError{stream, v.Type}
}
