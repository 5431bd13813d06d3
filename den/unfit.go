package den

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// A task (or queue) that requests more than any live den node offers
// waits for ever, visibly queued. The sweep says why, in the task's unfit
// field (queue.FieldUnfit), and removes the note once some node offers
// enough or the request is lowered. It costs at most one read per sweep,
// and none unless requests may be in play (unfitInPlay): what the nodes
// offer comes with the dead-node rescue's read of the node documents,
// which it makes anyway.

// unfitState is what the sweep keeps between passes for unfit notes. Only
// the loop's goroutine uses it.
type unfitState struct {
	// offers are the offers of the nodes alive at the last dead-node
	// check (every RescueEvery), by node name.
	offers map[string]queue.Resources
	// marked is how many queued tasks the last sweep left with a note:
	// while there are any, the sweep looks again, to remove them.
	marked int
}

// noteOffers keeps, from the node documents the dead-node rescue read, the
// offers of the nodes alive now.
func (n *Node) noteOffers(seen map[string]time.Time, offers map[string]queue.Resources, now time.Time) {
	live := make(map[string]queue.Resources, len(offers))
	for name, o := range offers {
		if now.Sub(seen[name]) <= n.cfg.DeadNodeAfter {
			live[name] = o
		}
	}
	n.unfit.offers = live
}

// largestOffer is the most memory and the most cores any live den node
// offers, this node's own as it is now.
func (n *Node) largestOffer() queue.Resources {
	all := []queue.Resources{n.capacity.total()}
	for name, o := range n.unfit.offers {
		if name != n.cfg.Name {
			all = append(all, o)
		}
	}
	return queue.Largest(all...)
}

// unfitInPlay reports, from what the node has in memory, whether a served
// task may request more than any node offers: a served queue's own request
// is more than this node offers; or a served queue has queued tasks that
// this node's claims do not find (claims have found it empty, its counts
// unchanged, since before the last count of what runs in it, and its
// count_todo is above that count: a task's own request, a start_after to
// come, an unmet dependency may hold them back; so may cancelled,
// orphaned and held tasks, which count_todo counts too); or the last sweep left
// notes to remove. A node whose queues and tasks request nothing, and
// whose queues' work it can claim, makes no query: while tasks run and
// end, a queue's counts change and its empty mark with them.
func (n *Node) unfitInPlay(serve []queue.Queue) bool {
	if n.unfit.marked > 0 {
		return true
	}
	st := &n.claiming
	mine := n.capacity.total()
	for _, q := range serve {
		if r := q.Control.Requested; r != nil && !r.Fits(mine) {
			return true
		}
		since, empty := st.emptySince(q)
		if empty && since.Before(n.runningAt) && countsOf(q).todo > int64(st.running.Queue(q.ID)) {
			return true
		}
	}
	return false
}

// noteUnfit is the sweep's step for unfit notes: one query for the tasks
// whose note may have to change, then one conditional write for each
// that does. It logs once per queue when tasks start waiting so, and once
// when none does any more.
func (n *Node) noteUnfit(ctx context.Context, serve []queue.Queue) error {
	if len(serve) == 0 || !n.unfitInPlay(serve) {
		return nil
	}
	largest := n.largestOffer()
	byID := make(map[bson.ObjectID]queue.Queue, len(serve))
	var overQueues []bson.ObjectID
	for _, q := range serve {
		byID[q.ID] = q
		if r := q.Control.Requested; r != nil && !r.Fits(largest) {
			overQueues = append(overQueues, q.ID)
		}
	}
	cands, err := n.store.UnfitCandidates(ctx, queueIDs(serve), overQueues, largest)
	if err != nil {
		return err
	}
	waiting := map[bson.ObjectID]int{}
	example := map[bson.ObjectID]string{}
	for _, c := range cands {
		reason := ""
		if c.Queued && !c.Bad {
			reason = queue.UnfitReason(requestOf(c.Requested, byID[c.Queue]), largest)
		}
		if reason != c.Unfit {
			if _, err := n.store.SetUnfit(ctx, c.ID, c.Unfit, reason); err != nil {
				return err
			}
		}
		if reason != "" {
			waiting[c.Queue]++
			example[c.Queue] = reason
		}
	}
	n.unfit.marked = 0
	seen := map[string]bool{}
	for id, count := range waiting {
		n.unfit.marked += count
		key := "unfit:" + id.Hex()
		seen[key] = true
		if n.notes.set(key, "") {
			n.log.Warn("queued tasks request more than any live den node offers; they wait, with the reason in their unfit field",
				zap.String("queue", byID[id].Name), zap.String("queue_id", id.Hex()), zap.Int("tasks", count), zap.String("example", example[id]))
		}
	}
	for _, key := range n.notes.keep("unfit:", seen) {
		id, _ := bson.ObjectIDFromHex(key[len("unfit:"):])
		n.log.Info("no queued task of the queue requests more than the live den nodes offer any more",
			zap.String("queue", byID[id].Name), zap.String("queue_id", id.Hex()))
	}
	return nil
}

// clearUnfit removes the unfit note of a task this node has just claimed:
// it fits here after all. A failure is left to the sweep, which removes
// the notes of claimed and running tasks.
func (n *Node) clearUnfit(ctx context.Context, id bson.ObjectID, was string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := n.store.SetUnfit(cctx, id, was, ""); err != nil {
		n.log.Debug("could not remove the unfit note of a claimed task; the sweep will", zap.String("task_id", id.Hex()), zap.Error(err))
	}
}
