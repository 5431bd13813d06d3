package held

import (
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Tasks is what this node holds: the tasks under its name that are
// Claimed or running, by queue. It decides how many more tasks the node
// may claim, between the passes that read them from the database, so that
// a slot freed by a finished runner is claimed again at once without
// asking the database what runs.
//
// It errs on the side of holding too much, never too little (a count too
// low would run more tasks than maxthreads allows): a task stays held from
// its claim until its runner is done with it (it said so on its task
// channel, or exited: its result is recorded and its processes stopped),
// even when the database already shows it finished, and a task read from
// the database is held until a later read no longer shows it. Only a
// runner this process started lets a task go between reads; a task its
// runner is done with is not taken back by a read that started before.
type Tasks struct {
	mu sync.Mutex
	// held maps each held task to its queue.
	held map[bson.ObjectID]bson.ObjectID
	// local are the held tasks whose runner this process started and that
	// has not exited yet.
	local map[bson.ObjectID]bool
	// gone are the tasks whose runner exited, with when: a read that
	// began before then may still show them claimed or running.
	gone map[bson.ObjectID]time.Time
	// req holds the requested_resources of held tasks that have one.
	req map[bson.ObjectID]queue.Resources
}

// New returns an empty Tasks.
func New() *Tasks {
	return &Tasks{held: map[bson.ObjectID]bson.ObjectID{}, local: map[bson.ObjectID]bool{}, gone: map[bson.ObjectID]time.Time{},
		req: map[bson.ObjectID]queue.Resources{}}
}

// Claimed holds a task this node has just claimed, with what it requests
// (zero: nothing).
func (o *Tasks) Claimed(id, q bson.ObjectID, req queue.Resources) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held[id], o.local[id] = q, true
	if req != (queue.Resources{}) {
		o.req[id] = req
	}
	delete(o.gone, id)
}

// Reserved is what the held tasks requested, together.
func (o *Tasks) Reserved() queue.Resources {
	o.mu.Lock()
	defer o.mu.Unlock()
	var r queue.Resources
	for _, q := range o.req {
		r = r.Add(q)
	}
	return r
}

// Done lets go of a task whose runner exited, or whose claim was put back
// or failed, at time at.
func (o *Tasks) Done(id bson.ObjectID, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.held, id)
	delete(o.local, id)
	delete(o.req, id)
	o.gone[id] = at
}

// Read replaces what the database says this node holds with tasks, read
// by a query sent at sent. Tasks of runners this process still runs stay
// held whatever the read says; tasks whose runner exited after sent are
// not held again.
func (o *Tasks) Read(tasks []queue.Task, sent time.Time, reqOf func(queue.Task) queue.Resources) {
	o.mu.Lock()
	defer o.mu.Unlock()
	held := make(map[bson.ObjectID]bson.ObjectID, len(tasks)+len(o.local))
	for id := range o.local {
		held[id] = o.held[id]
	}
	for _, t := range tasks {
		if at, ok := o.gone[t.ID]; ok && !at.Before(sent) {
			continue
		}
		held[t.ID] = t.Queue
		if r := reqOf(t); r != (queue.Resources{}) && !o.local[t.ID] {
			o.req[t.ID] = r
		}
	}
	o.held = held
	for id := range o.req {
		if _, ok := held[id]; !ok {
			delete(o.req, id)
		}
	}
	for id, at := range o.gone {
		if at.Before(sent.Add(-time.Minute)) {
			delete(o.gone, id)
		}
	}
}

// Finished reports whether a task's runner said it was done with it (or
// exited) within the last minute or so: a read may still show it running.
func (o *Tasks) Finished(id bson.ObjectID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.gone[id]
	return ok
}

// Counts returns how many tasks this node holds, by queue and in all.
func (o *Tasks) Counts() (map[bson.ObjectID]int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[bson.ObjectID]int, len(o.held))
	for _, q := range o.held {
		out[q]++
	}
	return out, len(o.held)
}

// Any reports whether this node holds any task.
func (o *Tasks) Any() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.held) > 0
}
