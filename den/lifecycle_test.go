package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A node that stops cleanly says so in its node document (stopped, with
// its last timestamp), so that it shows as stopped, not dead; started
// again under its name, it runs, and the mark is gone.
func TestStoppedNodeSaysSo(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	state := func() (string, bson.Raw) {
		nodes, err := store.Nodes(dentest.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Name == "stopper" {
				return n.State(time.Now(), queue.DefaultDeadNodeAfter), n.Raw
			}
		}
		return "", nil
	}
	n := startNode(t, db, "stopper")
	dentest.Eventually(t, time.Minute, "the node document", func() bool { s, _ := state(); return s == queue.NodeRunning })
	n.Stop()
	s, raw := state()
	if s != queue.NodeStopped || raw.Lookup("stopped").Type != bson.TypeDateTime {
		t.Fatalf("a node that stopped cleanly is %q: %s", s, raw)
	}
	startNode(t, db, "stopper")
	dentest.Eventually(t, time.Minute, "the restarted node running", func() bool {
		s, raw := state()
		return s == queue.NodeRunning && raw.Lookup("stopped").Type == 0
	})
}
