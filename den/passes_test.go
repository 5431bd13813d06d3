package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// heartbeat returns the timestamp of node's document, or the zero time.
func heartbeat(t *testing.T, db *mongo.Database, node string) time.Time {
	t.Helper()
	raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: node}}).Raw()
	if err != nil {
		return time.Time{}
	}
	ts, _ := raw.Lookup("timestamp").TimeOK()
	return ts
}

// waitPasses returns once each named node has completed n passes of its
// loop that started after the call, each starting at least every after the
// one before (after 0: any passes). With every the node's RescueEvery, n
// rescue passes have run: a test that asserts "nothing changed" after them
// has given the node the chance to change it.
//
// A pass is seen by its node document's timestamp, which the pass writes
// (queue.Store.Heartbeat) before it rescues, sweeps and claims, and the
// passes of a node run one after the other. So a pass whose timestamp is
// at least T+every rescued, unless one after T already did; and a pass is
// complete once a later one has written its timestamp.
func waitPasses(t *testing.T, db *mongo.Database, nodes []string, n int, every time.Duration) {
	t.Helper()
	for _, node := range nodes {
		since := time.Now()
		for i := range n + 1 {
			gap := every
			if every > 0 {
				gap += time.Millisecond // timestamps are stored in whole milliseconds
			}
			if i == n {
				gap = 0 // the pass that shows the last one complete
			}
			dentest.Eventually(t, 2*time.Minute, "a pass of node "+node, func() bool {
				ts := heartbeat(t, db, node)
				if ts.After(since) && !ts.Before(since.Add(gap)) {
					since = ts
					return true
				}
				return false
			})
		}
	}
}
