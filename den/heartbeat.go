package den

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// NodeQueuesMax is the most queues a node lists in its node document.
// Past it, the node lists the queues it holds tasks of first, then those
// with tasks to do, then the rest by name, and counts what it left out in
// queues_left_out: with 10,000 queues the document stays under 100 KB
// instead of growing to megabytes rewritten every pass.
const NodeQueuesMax = 256

// heartbeat is what the node knows of its own node document: the queues
// it last listed and when, how many it left out, and when a pass last
// wrote it.
type heartbeat struct {
	queues  []queue.NodeQueue
	at      time.Time
	leftOut int
	// last is when the document was last written (UnixNano), by a pass or
	// by keepAlive.
	last atomic.Int64
}

// writeNodeDocument writes the node document of a full pass (the
// protocol's heartbeat): its timestamp, what the node says of itself, and
// its queues array, only when an entry changed or RefreshEvery has
// passed. It returns the node-wide limit the operator set in it.
func (n *Node) writeNodeDocument(ctx context.Context, queues, serve []queue.Queue, now time.Time) (queue.NodeLimit, string, error) {
	entries := n.nodeDocQueues(queues, serve)
	write := entries
	if slices.Equal(entries, n.beat.queues) && now.Sub(n.beat.at) < n.cfg.RefreshEvery {
		write = nil // unchanged: the timestamp only
	}
	limit, problem, err := n.store.Heartbeat(ctx, n.cfg.Name, write, n.self(ctx, now), now)
	if err != nil {
		return nil, "", err
	}
	n.beat.last.Store(now.UnixNano())
	if write != nil {
		n.beat.queues, n.beat.at = entries, now
	}
	return limit, problem, nil
}

// nodeDocQueues is the queues array of the node document: the queues the
// node serves or holds tasks of (not every queue of the database), each
// as the protocol defines its entry, at most NodeQueuesMax of them.
func (n *Node) nodeDocQueues(queues, serve []queue.Queue) []queue.NodeQueue {
	holds, _ := n.claimer.held.counts()
	served := make(map[bson.ObjectID]bool, len(serve))
	for _, q := range serve {
		served[q.ID] = true
	}
	entries := make([]queue.NodeQueue, 0, min(len(serve), NodeQueuesMax))
	rank := make(map[string]int, len(serve))
	for _, q := range queues {
		if !served[q.ID] && holds[q.ID] == 0 {
			continue
		}
		e := queue.NewNodeQueue(q, n.claimer.othersRunning(q.ID)+holds[q.ID])
		switch {
		case holds[q.ID] > 0:
			rank[e.ID] = 0
		case e.TasksTodo > 0 || e.TasksDoing > 0:
			rank[e.ID] = 1
		default:
			rank[e.ID] = 2
		}
		entries = append(entries, e)
	}
	n.beat.leftOut = 0
	if len(entries) > NodeQueuesMax {
		slices.SortStableFunc(entries, func(a, b queue.NodeQueue) int {
			if c := rank[a.ID] - rank[b.ID]; c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		n.beat.leftOut = len(entries) - NodeQueuesMax
		entries = entries[:NodeQueuesMax]
	}
	return entries
}
