package queue

import "go.mongodb.org/mongo-driver/v2/bson"

// ByID is queues by _id, each pointing into the slice of queues it was
// made of (a node makes one of each full pass's read, which nothing
// changes once read: the housekeeping works with it while the next pass
// reads its own).
type ByID map[bson.ObjectID]*Queue

// NewByID indexes queues by _id, pointing into queues.
func NewByID(queues []Queue) ByID {
	byID := make(ByID, len(queues))
	for i := range queues {
		byID[queues[i].ID] = &queues[i]
	}
	return byID
}

// Of returns a task's queue as the pass read it, or nil.
func (ix ByID) Of(task Task) *Queue { return ix[task.Queue] }

// Request is what a held task requests: its own requested_resources, else
// its queue's (Requested).
func (ix ByID) Request(task Task) Resources {
	if q := ix.Of(task); q != nil {
		return Requested(task.Control.Requested, *q)
	}
	return Requested(task.Control.Requested, Queue{})
}

// IDs are the _ids of qs, in their order.
func IDs(qs []Queue) []bson.ObjectID {
	ids := make([]bson.ObjectID, len(qs))
	for i, q := range qs {
		ids[i] = q.ID
	}
	return ids
}

// Requested is what a claimed task requests: its own requested_resources,
// else its queue's, else nothing.
func Requested(task *Resources, q Queue) Resources {
	switch {
	case task != nil:
		return *task
	case q.Control.Requested != nil:
		return *q.Control.Requested
	}
	return Resources{}
}
