package den

import (
	"bytes"
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queueBook is what the loop knows of the queues. Every queue is read
// (the fields den reads) at the first pass, every fullReadEvery (a
// minute by default), when the queues the node serves may have changed
// (activequeues or ignorequeues did), and at the next pass after a pass
// saw a queue with work come or go or change whether this node serves it;
// the passes between read only the queues with work by their counts and
// those that had work (queue.NodeStore.QueuesWithWork), and put them in place.
// So a pass costs what the queues with work cost: with 80,000 queues and a
// few with work, a few documents a pass instead of 80,000, and a change to
// a queue with work (its counts, its settings, its removal) is seen at the
// next pass. A change to an idle queue (a setting, its name, a new queue
// without tasks) matters to claims only once it has work, and is then
// read; the node document and the metrics show it within fullReadEvery. A
// task inserted into an idle queue without raising its counts is found by
// the probe, as before, and claimed with the queue's settings of the last
// read of every queue. Only the loop's goroutine uses it.
type queueBook struct {
	// full is the last read of every queue, served first (serveable), and
	// fullIndex it by _id: neither is ever changed, for the housekeeping
	// works with them while the loop goes on.
	full      []queue.Queue
	served    int
	fullIndex queueIndex
	fullAt    time.Time
	// filter is the queue filter of the last read of every queue.
	filter queueFilter
	// own, when set, is full with the queues read since in place, and
	// ownIndex it by _id: the loop's own copy, made at the first change
	// after a full read.
	own      []queue.Queue
	ownIndex queueIndex
	// stale asks for a full read at the next pass.
	stale bool
}

// current returns the queues as the loop knows them now, served first,
// the served ones, and the queues by _id.
func (b *queueBook) current() (queues, serve []queue.Queue, byID queueIndex) {
	if b.own != nil {
		return b.own, b.own[:b.served:b.served], b.ownIndex
	}
	return b.full, b.full[:b.served:b.served], b.fullIndex
}

// fullReadEvery is how often the loop reads every queue: 6
// RefreshEvery, a minute by default.
func fullReadEvery(refresh time.Duration) time.Duration { return 6 * refresh }

// fullDue reports whether a pass at now, with filter, reads every queue.
func (b *queueBook) fullDue(now time.Time, every time.Duration, filter queueFilter) bool {
	return b.full == nil || b.stale || now.Sub(b.fullAt) >= every || !filter.same(b.filter)
}

// readQueues reads the queues for a pass (queueBook): every queue when a
// full read is due, else the queues with work, put in place. It returns
// the queues, served first, the served ones, the queues by _id, and
// whether it read every queue.
func (ps *passes) readQueues(ctx context.Context, now time.Time, filter queueFilter) (queues, serve []queue.Queue, byID queueIndex, full bool, err error) {
	b := &ps.book
	if b.fullDue(now, fullReadEvery(ps.params.RefreshEvery), filter) {
		all, malformed, err := ps.store.Queues(ctx)
		if err != nil {
			return nil, nil, nil, false, err
		}
		ps.noteMalformedQueues(malformed)
		serve := ps.serveable(all, filter)
		*b = queueBook{full: all, served: len(serve), fullIndex: indexQueues(all), fullAt: now, filter: filter}
		queues, serve, byID = b.current()
		return queues, serve, byID, true, nil
	}
	queues, _, byID = b.current()
	var had []bson.ObjectID
	for i := range queues {
		if q := &queues[i]; q.CountTodo != nil && *q.CountTodo > 0 {
			had = append(had, q.ID)
		}
	}
	fresh, err := ps.store.QueuesWithWork(ctx, had)
	if err != nil {
		return nil, nil, nil, false, err
	}
	seen := make(map[bson.ObjectID]bool, len(fresh))
	for _, f := range fresh {
		seen[f.ID] = true
		q, known := byID[f.ID]
		switch {
		case !known:
			b.stale = true // a new queue: the next pass reads them all
			continue
		case bytes.Equal(q.Raw, f.Raw):
			continue
		case ps.serves(*q, filter) != ps.serves(f, filter):
			b.stale = true // it is served, or no longer: the same
			continue
		}
		if b.own == nil {
			b.own = append([]queue.Queue(nil), b.full...)
			b.ownIndex = indexQueues(b.own)
			byID = b.ownIndex
		}
		*byID[f.ID] = f
	}
	for _, id := range had {
		if !seen[id] {
			b.stale = true // gone
		}
	}
	queues, serve, byID = b.current()
	return queues, serve, byID, false, nil
}
