package queue

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Task is a task document as a plugin sees it: typed access to the fields
// the protocol defines, and the whole document for anything else.
type Task struct {
	ID    bson.ObjectID
	Queue bson.ObjectID
	// Parameters is the task's parameters document ("an object describing
	// the unique qualities of this task"). Use DecodeParameters or
	// Parameters.Lookup to read it.
	Parameters bson.Raw
	// Node is the node that claimed the task.
	Node string
	// Ctime is the creation time, zero when missing.
	Ctime time.Time
	// Raw is the whole document as stored when the runner started the task.
	Raw bson.Raw
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

// ParseTask reads a task document for a runner. It fails, with a reason a
// user can act on, when a field the protocol requires is missing or of the
// wrong type; such a task is failed, never run.
func ParseTask(raw bson.Raw) (*Task, error) {
	t := &Task{Raw: raw}
	id, ok := raw.Lookup("_id").ObjectIDOK()
	if !ok {
		return nil, fmt.Errorf("task _id is %s, not an ObjectId", describe(raw.Lookup("_id")))
	}
	t.ID = id
	q := raw.Lookup("queue")
	if t.Queue, ok = q.ObjectIDOK(); !ok {
		return t, fmt.Errorf("task field queue is %s; it must be the ObjectId of a queue", describe(q))
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
		return t, fmt.Errorf("task field parameters is %s; it must be an object (a document), e.g. parameters: {commands: \"*\"}", describe(p))
	}
	if n, ok := raw.Lookup("node").StringValueOK(); ok {
		t.Node = n
	}
	if c, ok := timeValue(raw.Lookup("ctime")); ok {
		t.Ctime = c
	}
	return t, nil
}
