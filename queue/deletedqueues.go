package queue

import (
	"bytes"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DeletedQueue is a queue id that tasks name but no queue document has:
// den queue delete --force and Disbatch's deleteQueue leave a queue's
// tasks in tasks. No node runs them; an operator finds them by the id
// (den task list --queue ID, the page's task list) and archives or
// purges them.
type DeletedQueue struct {
	ID     bson.ObjectID
	Counts StatusCounts
}

// QueueIDs are the ids of the queue documents Queues returned: those that
// can be used and those that cannot but have an ObjectId _id (they still
// exist). A queue id a task names that is not among them is a deleted
// queue's.
func QueueIDs(queues []Queue, bad []MalformedQueue) map[bson.ObjectID]bool {
	known := make(map[bson.ObjectID]bool, len(queues)+len(bad))
	for _, q := range queues {
		known[q.ID] = true
	}
	for _, b := range bad {
		switch id := b.ID.(type) {
		case bson.ObjectID:
			known[id] = true
		case bson.RawValue:
			if oid, ok := id.ObjectIDOK(); ok {
				known[oid] = true
			}
		}
	}
	return known
}

// Deleted returns the queues the census counted tasks of whose document
// is gone: neither queues nor bad (documents that cannot be used, which
// still exist) has their id (QueueIDs); the newest id first. It reads
// nothing: a view that read the census and the queues has what it takes,
// so its "deleted queues" cost no read of tasks. As old as the census: a
// queue deleted since shows once the census is made again.
func (c *Census) Deleted(queues []Queue, bad []MalformedQueue) []DeletedQueue {
	known := QueueIDs(queues, bad)
	var out []DeletedQueue
	for id, counts := range c.Queues {
		if !known[id] && counts.Total() > 0 {
			out = append(out, DeletedQueue{ID: id, Counts: counts})
		}
	}
	slices.SortFunc(out, func(a, b DeletedQueue) int { return bytes.Compare(b.ID[:], a.ID[:]) })
	return out
}
