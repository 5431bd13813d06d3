package web

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// A queue's page makes two reads that grow with the queue's tasks, not
// with its queues: why its newest waiting task waits when nothing in the
// queue holds it (queue's Why: the tasks a claim takes before it,
// counted up to queue.WhyCounted), and its last queueRateOf ended tasks
// (the failure rate). Each is made at most once every three times
// web.counts_age (30 s by default) per queue, for every viewer of the
// page, and the page says how old they are: watching a queue costs what
// the queue costs, however many watch and however often their pages
// reload.

// queueReadsAges is how many times the census's age a queue page's
// shared reads may be.
const queueReadsAges = 3

// queueReadsKept is the most queues whose reads are kept at once: past
// it, the reads too old to show go, then the oldest.
const queueReadsKept = 1000

// queueReads is what one queue's page read.
type queueReads struct {
	at time.Time
	// ended are the queue's last ended tasks.
	ended []queue.Task
	// why is why the newest waiting task waits when nothing in the queue
	// holds it (nil: no task waits); whyTask is that task.
	why     []queue.Reason
	whyTask string
}

// queueReadsCache keeps each queue's reads for age (none when age is
// 0).
type queueReadsCache struct {
	age time.Duration
	mu  sync.Mutex
	m   map[bson.ObjectID]queueReads
}

// get returns queue id's reads when they are at most c.age old at now.
func (c *queueReadsCache) get(id bson.ObjectID, now time.Time) (queueReads, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[id]
	if !ok || now.Sub(r.at) > c.age || now.Before(r.at) {
		return queueReads{}, false
	}
	return r, true
}

// put keeps queue id's reads.
func (c *queueReadsCache) put(id bson.ObjectID, r queueReads) {
	if c.age <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[bson.ObjectID]queueReads{}
	}
	if _, ok := c.m[id]; !ok && len(c.m) >= queueReadsKept {
		var oldest bson.ObjectID
		for k, v := range c.m {
			if r.at.Sub(v.at) > c.age {
				delete(c.m, k)
			} else if oldest.IsZero() || v.at.Before(c.m[oldest].at) {
				oldest = k
			}
		}
		if len(c.m) >= queueReadsKept {
			delete(c.m, oldest)
		}
	}
	c.m[id] = r
}

// queueReadsOf returns queue q's shared reads, made now when those kept
// are too old. waiting says whether the census counts a task waiting;
// why is asked only when facts give no reason of the queue's own.
func (h *handler) queueReadsOf(ctx context.Context, q queue.Queue, facts *queue.Facts, waiting bool) (queueReads, error) {
	now := h.now()
	if r, ok := h.queueReads.get(q.ID, now); ok && (r.why != nil) == waiting {
		return r, nil
	}
	r := queueReads{at: now}
	var err error
	if r.ended, err = h.store.LastEnded(ctx, q.ID, queueRateOf); err != nil {
		return r, err
	}
	if waiting {
		r.why = []queue.Reason{}
		// Nothing in the queue holds its tasks: ask the newest waiting
		// one, as den task why does.
		w, err := h.store.ListTasks(ctx, queue.TaskFilter{Queues: []bson.ObjectID{q.ID}, Statuses: []int{queue.StatusQueued, queue.StatusTerminated, queue.StatusBlocked}, Limit: 1})
		if err != nil {
			return r, err
		}
		if len(w) > 0 {
			if r.why, err = h.store.Why(ctx, facts, w[0]); err != nil {
				return r, err
			}
			r.whyTask = w[0].ID.Hex()
		}
	}
	h.queueReads.put(q.ID, r)
	return r, nil
}
