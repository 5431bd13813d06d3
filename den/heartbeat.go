package den

import (
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// NodeQueuesMax is the most queues a node lists in its node document.
// Past it, the node lists the queues it holds tasks of first, then those
// with tasks to do, then the rest by name, and counts what it left out in
// queues_left_out: with 10,000 queues the document stays under 100 KB
// instead of growing to megabytes rewritten every pass.
const NodeQueuesMax = 256

// nodeDocQueues is the queues array of the node document: the queues the
// node serves or holds tasks of (not every queue of the database), each
// as the protocol defines its entry, at most NodeQueuesMax of them.
func (n *Node) nodeDocQueues(queues, serve []queue.Queue) []queue.NodeQueue {
	holds, _ := n.held.counts()
	served := make(map[bson.ObjectID]bool, len(serve))
	for _, q := range serve {
		served[q.ID] = true
	}
	st := &n.claiming
	entries := make([]queue.NodeQueue, 0, min(len(serve), NodeQueuesMax))
	rank := make(map[string]int, len(serve))
	for _, q := range queues {
		if !served[q.ID] && holds[q.ID] == 0 {
			continue
		}
		others := st.running.Queue(q.ID) - st.running.Node(q.ID, n.cfg.Name)
		e := queue.NewNodeQueue(q, max(others, 0)+holds[q.ID])
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
	n.nodeQueuesLeftOut = 0
	if len(entries) > NodeQueuesMax {
		slices.SortStableFunc(entries, func(a, b queue.NodeQueue) int {
			if c := rank[a.ID] - rank[b.ID]; c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		n.nodeQueuesLeftOut = len(entries) - NodeQueuesMax
		entries = entries[:NodeQueuesMax]
	}
	return entries
}
