package den

import (
	"bytes"
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queueBook is what the loop knows of the queues. Every queue is read
// (the fields den reads) at the first pass, every fullReadEvery (a
// minute by default), and when the queues the node serves may have
// changed (activequeues or ignorequeues did). The passes between read,
// with one query (queue.NodeStore.QueuesWithWork), the queues with work
// by their counts, those that had work, and those made since a little
// before the last read of every queue (newQueueLookback, by the time in
// their _id), and put what they read in place: a queue with work that
// changed, a new queue, a queue that is gone. So a pass costs what the
// queues with work cost: with 80,000 queues and a few with work, a few
// documents a pass instead of 80,000; and a queue a driver inserted a
// moment ago, with tasks that raised no counts, is known at the next pass,
// where the probe finds its tasks (probe.go).
//
// A change to an idle queue (a setting, its name) matters to claims only
// once it has work: it is then read again, at the pass its counts tell of
// work, or when the probe finds a task in it (probe.go reads the queues it
// found work in before they are claimed from). The node document and the
// metrics show such a change within fullReadEvery. Only the loop's
// goroutine uses it.
type queueBook struct {
	// full is the last read of every queue, served first (serveable), and
	// fullIndex it by _id: neither is ever changed, for the housekeeping
	// works with them while the loop goes on.
	full      []queue.Queue
	served    int
	fullIndex queue.ByID
	fullAt    time.Time
	// filter is the queue filter of the last read of every queue.
	filter queueFilter
	// own, when set, is full with the queues read since in place (served
	// first, ownServed of them), and ownIndex it by _id: the loop's own
	// copy, made at the first change after a full read.
	own       []queue.Queue
	ownServed int
	ownIndex  queue.ByID
	// stale asks for a full read at the next pass.
	stale bool
}

// newQueueLookback is how long before the last read of every queue a
// queue's _id may have been made for the passes to read it as new: the
// time in an _id is its writer's clock, so a queue inserted by a writer
// whose clock is up to this much behind the server's is still seen at the
// next pass; one further behind (or one inserted with an _id of its own
// making, as a restore does) is seen by the next read of every queue, or
// at once where the probe finds a task in it.
const newQueueLookback = 30 * time.Second

// current returns the queues as the loop knows them now, served first,
// the served ones, and the queues by _id.
func (b *queueBook) current() (queues, serve []queue.Queue, byID queue.ByID) {
	if b.own != nil {
		return b.own, b.own[:b.ownServed:b.ownServed], b.ownIndex
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
// full read is due, else the queues with work and the new ones, put in
// place. It returns the queues, served first, the served ones, the queues
// by _id, and whether it read every queue.
func (ps *passes) readQueues(ctx context.Context, now time.Time, filter queueFilter) (queues, serve []queue.Queue, byID queue.ByID, full bool, err error) {
	b := &ps.book
	if b.fullDue(now, fullReadEvery(ps.params.RefreshEvery), filter) {
		all, malformed, err := ps.Store.Queues(ctx)
		if err != nil {
			return nil, nil, nil, false, err
		}
		ps.noteMalformedQueues(malformed)
		serve := ps.serveable(all, filter)
		*b = queueBook{full: all, served: len(serve), fullIndex: queue.NewByID(all), fullAt: now, filter: filter}
		ps.probed.skip = nil
		queues, serve, byID = b.current()
		return queues, serve, byID, true, nil
	}
	queues, _, _ = b.current()
	var had []bson.ObjectID
	for i := range queues {
		if q := &queues[i]; q.CountTodo != nil && *q.CountTodo > 0 {
			had = append(had, q.ID)
		}
	}
	fresh, err := ps.Store.QueuesWithWork(ctx, queue.WorkRead{IDs: had, Since: b.fullAt.Add(-newQueueLookback)})
	if err != nil {
		return nil, nil, nil, false, err
	}
	seen := make(map[bson.ObjectID]bool, len(fresh))
	for _, f := range fresh {
		seen[f.ID] = true
	}
	var gone []bson.ObjectID
	for _, id := range had {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	b.update(fresh, gone, func(q queue.Queue) bool { return ps.serves(q, filter) })
	queues, serve, byID = b.current()
	return queues, serve, byID, false, nil
}

// update puts what a pass read in place: fresh queues replace those of
// the same _id (or are added, when the book does not know them), and the
// queues gone are removed. serves tells whether this node serves a queue:
// a queue that is added, removed, or whose serving changed reorders the
// book (served first); one that only changed is replaced where it is.
func (b *queueBook) update(fresh []queue.Queue, gone []bson.ObjectID, serves func(queue.Queue) bool) {
	queues, _, byID := b.current()
	var changed []queue.Queue
	reorder := false
	for _, f := range fresh {
		q, known := byID[f.ID]
		switch {
		case known && bytes.Equal(q.Raw, f.Raw):
			continue
		case !known || serves(*q) != serves(f):
			reorder = true
		}
		changed = append(changed, f)
	}
	for _, id := range gone {
		if _, known := byID[id]; known {
			reorder = true
		}
	}
	if len(changed) == 0 && !reorder {
		return
	}
	if reorder {
		b.rebuild(queues, changed, gone, serves)
		return
	}
	if b.own == nil {
		b.own, b.ownServed = slices.Clone(b.full), b.served
		b.ownIndex = queue.NewByID(b.own)
	}
	for _, f := range changed {
		*b.ownIndex[f.ID] = f
	}
}

// rebuild makes the loop's own copy anew from queues, with changed in
// place of (or beside) the queues of their _id and without gone, served
// first: the served in the order they were, then those new, then the
// others likewise.
func (b *queueBook) rebuild(queues, changed []queue.Queue, gone []bson.ObjectID, serves func(queue.Queue) bool) {
	replace := make(map[bson.ObjectID]queue.Queue, len(changed))
	for _, f := range changed {
		replace[f.ID] = f
	}
	drop := make(map[bson.ObjectID]bool, len(gone))
	for _, id := range gone {
		drop[id] = true
	}
	served := make([]queue.Queue, 0, len(queues)+len(changed))
	var others []queue.Queue
	put := func(q queue.Queue) {
		if serves(q) {
			served = append(served, q)
		} else {
			others = append(others, q)
		}
	}
	for _, q := range queues {
		if drop[q.ID] {
			continue
		}
		if f, ok := replace[q.ID]; ok {
			q = f
			delete(replace, q.ID)
		}
		put(q)
	}
	for _, f := range changed { // the new ones, in the order read
		if _, ok := replace[f.ID]; ok && !drop[f.ID] {
			put(f)
		}
	}
	b.ownServed = len(served)
	b.own = append(served, others...)
	b.ownIndex = queue.NewByID(b.own)
}

// refreshQueues reads the queues ids names again and puts them in place
// (queueBook.update): a queue the probe found work in was read at the last
// read of every queue, or never, and claims go by its settings now. A
// queue that is gone, or cannot be read as a queue, is left out of the
// book and of later probes until the next read of every queue
// (probeState.skip). It updates p's queues.
func (ps *passes) refreshQueues(ctx context.Context, ids []bson.ObjectID, p *fullPass) error {
	fresh, err := ps.Store.QueuesByID(ctx, ids)
	if err != nil {
		return err
	}
	seen := make(map[bson.ObjectID]bool, len(fresh))
	for _, f := range fresh {
		seen[f.ID] = true
	}
	var gone []bson.ObjectID
	for _, id := range ids {
		if !seen[id] {
			gone = append(gone, id)
			if ps.probed.skip == nil {
				ps.probed.skip = map[bson.ObjectID]bool{}
			}
			ps.probed.skip[id] = true
		}
	}
	ps.book.update(fresh, gone, func(q queue.Queue) bool { return ps.serves(q, p.filter) })
	p.queues, p.serve, p.byID = ps.book.current()
	return nil
}
