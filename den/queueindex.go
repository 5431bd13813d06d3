package den

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queuesRead holds the queues of the loop's last read of every queue, by
// _id: the passes store them, and metrics and the pool (a runner's
// reports, counted under its queue's name) read them outside the loop.
type queuesRead struct {
	atomic.Pointer[queue.ByID]
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
