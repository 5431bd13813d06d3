package den

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queueIndex is the queues of a full pass by _id, each pointing into the
// pass's own slice of queues, which nothing changes once the pass has read
// it (the housekeeping works with it while the next pass reads its own).
type queueIndex map[bson.ObjectID]*queue.Queue

func indexQueues(queues []queue.Queue) queueIndex {
	byID := make(queueIndex, len(queues))
	for i := range queues {
		byID[queues[i].ID] = &queues[i]
	}
	return byID
}

// of returns a task's queue as the pass read it, or nil.
func (ix queueIndex) of(task queue.Task) *queue.Queue { return ix[task.Queue] }

// request is what a held task requests: its own requested_resources, else
// its queue's (requestOf).
func (ix queueIndex) request(task queue.Task) queue.Resources {
	if q := ix.of(task); q != nil {
		return requestOf(task.Control.Requested, *q)
	}
	return requestOf(task.Control.Requested, queue.Queue{})
}

// queuesRead holds the queues of the loop's last read of every queue, by
// _id: the passes store them, and metrics and the pool (a runner's
// reports, counted under its queue's name) read them outside the loop.
type queuesRead struct {
	atomic.Pointer[queueIndex]
}

// name is the name of queue id as the last full pass read it, else
// fallback.
func (r *queuesRead) Name(id bson.ObjectID, fallback string) string {
	if p := r.Load(); p != nil {
		if q, ok := (*p)[id]; ok {
			return q.Name
		}
	}
	return fallback
}
