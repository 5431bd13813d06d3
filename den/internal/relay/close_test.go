package relay_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
)

// A runner whose node is gone (its dialer serves it from a relay of its
// own) closes its dialer while the database does not answer: handshakes
// of its driver wait in the local relay for the server's hello, one at a
// time, each up to 30 s. Close returns once its context ends, not after
// them: a runner giving up exits in bounded time. Before, Close waited
// for every one of them (37 s in the runner's end-to-end test).
func TestDialerCloseEndsWithItsContext(t *testing.T) {
	t.Parallel()
	p := dentest.Faults(t, 1, dentest.Rule{Command: "hello", Fault: dentest.Delay, Delay: 10 * time.Minute, Rate: 1,
		// The relay's own hello for the server's limits: no client
		// metadata (a connection's handshake) and no topologyVersion (a
		// monitor's).
		Match: func(docs []bson.Raw) bool {
			return len(docs) > 0 && docs[0].Lookup("client").Type == 0 && docs[0].Lookup("topologyVersion").Type == 0
		}})
	s := newSetup(t, func(context.Context) (*mongo.Client, error) {
		return mongo.Connect(options.Client().ApplyURI(p.URI()).SetServerSelectionTimeout(time.Minute))
	})
	s.relay.Close() // the node is gone
	opCtx, cancelOps := context.WithCancel(context.Background())
	defer cancelOps()
	coll := s.runner.Database("d").Collection("c")
	for range 3 {
		go coll.InsertOne(opCtx, bson.D{{Key: "n", Value: 1}}) // each on a connection of its own
	}
	dentest.Eventually(t, time.Minute, "the local relay waiting for the server's hello", func() bool { return len(p.Injected()) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		s.dialer.Close(ctx)
		close(closed)
	}()
	select {
	case <-closed:
		t.Logf("Close returned %s after it was called", time.Since(start).Round(10*time.Millisecond))
	case <-time.After(25 * time.Second): // a hello waits 30 s, three of them 90 s
		t.Fatal("the dialer's Close outlived its context by 24 s: it waits for the handshakes in flight")
	}
}
