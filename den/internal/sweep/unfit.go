package sweep

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/rescue"
	"github.com/den-project/den/queue"
)

// A task (or queue) that requests more than any live den node offers
// waits for ever, visibly queued. The sweep says why, in the task's unfit
// field (queue.FieldUnfit), and removes the note once some node offers
// enough or the request is lowered. It costs no command of its own: the
// tasks to look at come with the sweep's query for malformed fields
// (queue.UnfitQuery), what the other nodes offer with the dead-node
// rescue's read of the node documents, and a task's note is written only
// when it starts or stops waiting so (not when the offers' numbers move).

// noteOffers keeps, from the node documents the dead-node rescue read, the
// offers of the nodes alive now.
func (sw *Sweeper) NoteOffers(nodes rescue.NodesSeen) {
	sw.offers = queue.LiveOffers(nodes.Beats, nodes.Offers, nodes.At.Add(-sw.Params.DeadNodeAfter))
}

// largestOffer is the most memory and the most cores any live den node
// offers, this node's own as it is now (what its node document says).
func (sw *Sweeper) largestOffer(ctx context.Context) queue.Resources {
	all := []queue.Resources{sw.Self.Offer(ctx)}
	for name, o := range sw.offers {
		if name != sw.Params.Name {
			all = append(all, o)
		}
	}
	return queue.Largest(all...)
}

// unfitQuery is what the sweep's query also asks for, for unfit notes.
func (sw *Sweeper) unfitQuery(ctx context.Context, serve []queue.Queue) *queue.UnfitQuery {
	u := &queue.UnfitQuery{Largest: sw.largestOffer(ctx)}
	for _, q := range serve {
		if r := q.Control.Requested; r != nil && !r.Fits(u.Largest) {
			u.OverQueues = append(u.OverQueues, q.ID)
		}
	}
	return u
}

// noteUnfit is the sweep's step for unfit notes, on the tasks its query
// returned: a conditional write for each task that starts or stops
// waiting for a node that can run it. It logs once per queue when tasks
// start waiting so, and once when none does any more.
func (sw *Sweeper) noteUnfit(ctx context.Context, serve []queue.Queue, u *queue.UnfitQuery, tasks []queue.Task) error {
	byID := make(map[bson.ObjectID]*queue.Queue, len(serve))
	for i := range serve {
		byID[serve[i].ID] = &serve[i]
	}
	waiting := map[bson.ObjectID]int{}
	example := map[bson.ObjectID]string{}
	for _, t := range tasks {
		c := queue.UnfitCandidateOf(t)
		reason := ""
		if c.Queued && !c.Bad {
			var q queue.Queue
			if p := byID[c.Queue]; p != nil {
				q = *p
			}
			reason = queue.UnfitReason(queue.Requested(c.Requested, q), u.Largest)
		}
		if (reason == "") != (c.Unfit == "") {
			if _, err := sw.Store.SetUnfit(ctx, c.ID, c.Unfit, reason); err != nil {
				return err
			}
		}
		if reason != "" {
			waiting[c.Queue]++
			example[c.Queue] = reason
		}
	}
	seen := map[string]bool{}
	for id, count := range waiting {
		key := "unfit:" + id.Hex()
		seen[key] = true
		if sw.Notes.Set(key, "") {
			sw.Log.Warn("queued tasks request more than any live den node offers; they wait, with the reason in their unfit field",
				base.QueueField(byID[id].Name), zap.String("queue_id", id.Hex()), zap.Int("tasks", count), zap.String("example", example[id]))
		}
	}
	if len(tasks) >= queue.IrregularLimit {
		return nil // some were left for the next sweep: nothing to say of the others yet
	}
	for _, key := range sw.Notes.Keep("unfit:", seen) {
		id, _ := bson.ObjectIDFromHex(key[len("unfit:"):])
		sw.Log.Info("no queued task of the queue requests more than the live den nodes offer any more",
			base.QueueField(byID[id].Name), zap.String("queue_id", id.Hex()))
	}
	return nil
}
