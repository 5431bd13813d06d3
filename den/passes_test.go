package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// heartbeat returns the timestamp of node's document, or the zero time.
func heartbeat(t testing.TB, db *mongo.Database, node string) time.Time {
	t.Helper()
	raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: node}}).Raw()
	if err != nil {
		return time.Time{}
	}
	ts, _ := raw.Lookup("timestamp").TimeOK()
	return ts
}

// housekeeping returns node's last completed round of housekeeping as
// its node document says, or zero times.
func housekeeping(t testing.TB, db *mongo.Database, node string) (pass, started time.Time) {
	t.Helper()
	raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: node}}).Raw()
	if err != nil {
		return time.Time{}, time.Time{}
	}
	h, _ := raw.Lookup(queue.FieldHousekeeping).DocumentOK()
	pass, _ = h.Lookup("pass").TimeOK()
	started, _ = h.Lookup("started").TimeOK()
	return pass, started
}

// waitPasses returns once each named node has completed n rounds of its
// housekeeping, each after a full pass that started after the call, and
// each starting at least every after the one before (after 0: any
// rounds). With every the node's RescueEvery, n rescues have run: a test
// that asserts "nothing changed" after them has given the node the chance
// to change it, by its claims as well.
//
// A round is seen by its node document's housekeeping field: when the
// full pass whose queues it worked on started (after its claims), when
// the round started, and when it ended; a pass writes it as the last
// round left it. Rounds run one after the other, each after a full pass,
// and every step of a round goes by the round's start: a round whose
// pass started at least T+every after one that started at T rescued.
func waitPasses(t testing.TB, db *mongo.Database, nodes []string, n int, every time.Duration) {
	t.Helper()
	for _, node := range nodes {
		since := time.Now()
		for range n {
			gap := every
			if every > 0 {
				gap += time.Millisecond // times are stored in whole milliseconds
			}
			dentest.Eventually(t, 2*time.Minute, "a round of node "+node, func() bool {
				pass, started := housekeeping(t, db, node)
				if pass.After(since) && !pass.Before(since.Add(gap)) {
					since = started
					return true
				}
				return false
			})
		}
	}
}

// waitStartUp returns once node, just started, has done what a node does
// once at its start (its indexes, its first read of every queue, the
// queues' counts): two rounds of its housekeeping, as its node document
// says. A benchmark measures from there, not the start-up.
func waitStartUp(t testing.TB, db *mongo.Database, node string) {
	t.Helper()
	waitPasses(t, db, []string{node}, 2, 0)
}
