package heartbeat

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/queue"
)

// noOthers says no other node holds tasks.
type noOthers struct{}

func (noOthers) OthersRunning(bson.ObjectID) int { return 0 }

// The node document lists, past NodeQueuesMax queues, those the node holds
// tasks of, then those with work, then the first by name, each group by
// name; below it, every served queue and every queue held, in the order
// read; and it counts what it left out. Its pick (a heap, not a sort of
// every queue) is checked against sorting them all.
func TestNodeDocumentEntries(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, NodeQueuesMax, NodeQueuesMax + 1, 3000} {
		queues := make([]queue.Queue, n+20)
		held := held.New()
		for i := range queues {
			todo := int64(0)
			if i%97 == 0 {
				todo = 3
			}
			// Names in no order, some the same.
			queues[i] = queue.Queue{ID: bson.NewObjectID(), Name: fmt.Sprintf("q-%05d", (i*7919)%(n/2+1)), CountTodo: &todo}
			if i%211 == 0 {
				held.Claimed(bson.NewObjectID(), queues[i].ID, queue.Resources{})
			}
		}
		// The first n are served; the 20 after them are held or not.
		held.Claimed(bson.NewObjectID(), queues[n+3].ID, queue.Resources{})
		h := &Beat{Held: held, Others: noOthers{}}
		got := h.entries(queues, queues[:n])

		holds, _ := held.Counts()
		type ranked struct {
			e    queue.NodeQueue
			rank int
		}
		var all []ranked
		for i, q := range queues {
			if i >= n && holds[q.ID] == 0 {
				continue
			}
			e := queue.NewNodeQueue(q, holds[q.ID])
			r := 2
			switch {
			case holds[q.ID] > 0:
				r = 0
			case e.TasksTodo > 0 || e.TasksDoing > 0:
				r = 1
			}
			all = append(all, ranked{e, r})
		}
		want := make([]queue.NodeQueue, 0, len(all))
		left := 0
		if len(all) > NodeQueuesMax {
			slices.SortStableFunc(all, func(a, b ranked) int {
				if c := a.rank - b.rank; c != 0 {
					return c
				}
				return strings.Compare(a.e.Name, b.e.Name)
			})
			left = len(all) - NodeQueuesMax
			all = all[:NodeQueuesMax]
		}
		for _, r := range all {
			want = append(want, r.e)
		}
		// Among equal names the order may differ: compare names, and the
		// set of queues.
		names := func(es []queue.NodeQueue) []string {
			out := make([]string, len(es))
			for i, e := range es {
				out[i] = e.Name
			}
			return out
		}
		if !slices.Equal(names(got), names(want)) || h.leftOut != left {
			t.Errorf("%d queues: listed %d (%d left out), want %d (%d left out)\n got %v\nwant %v", n, len(got), h.leftOut, len(want), left, names(got), names(want))
		}
	}
}
