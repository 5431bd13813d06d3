package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// hasChangeStreams reports whether the server that answered hello is a replica set or a
// sharded cluster: the servers with change streams.
func hasChangeStreams(hello bson.Raw) bool {
	_, isSet := hello.Lookup("setName").StringValueOK()
	msg, _ := hello.Lookup("msg").StringValueOK()
	return isSet || msg == "isdbgrid"
}

// The arrivals of queued tasks, from a change stream of task inserts.
// The development server (FerretDB) and a standalone MongoDB have no
// change streams: WatchArrivals returns no stream and the server's
// refusal (a node then stops watching, and finds new tasks by its passes
// alone). On a replica set or a
// sharded cluster (DEN_TEST_MONGODB_URI naming one), each insert of a
// queued task brings its queue, in order; a task inserted with another
// status, or whose queue is not an ObjectId, brings nothing; Next ends
// with its context, and Close closes the stream.
func TestWatchArrivals(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	hello, err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	arrivals, err := s.WatchArrivals(ctx)
	if !hasChangeStreams(hello) {
		if err == nil || arrivals != nil || !strings.HasPrefix(err.Error(), "watch task inserts: ") {
			t.Fatalf("WatchArrivals without change streams = %v, %v; want no stream and an error saying what failed", arrivals, err)
		}
		// The server's refusal, as such: a node stops watching for good
		// on it (den's changeStream), rather than retrying for ever.
		var refused mongo.ServerError
		if !errors.As(err, &refused) {
			t.Fatalf("WatchArrivals without change streams: %v (%T), want the server's refusal (a mongo.ServerError)", err, errors.Unwrap(err))
		}
		return
	}
	if err != nil {
		t.Fatalf("WatchArrivals on a server with change streams: %v", err)
	}
	a, b := bson.NewObjectID(), bson.NewObjectID()
	tasks := db.Collection("tasks")
	dentest.Insert(t, tasks, bson.D{{Key: "queue", Value: a}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}})
	dentest.Insert(t, tasks, bson.D{{Key: "queue", Value: bson.NewObjectID()}, {Key: "status", Value: queue.StatusSucceeded}, {Key: "node", Value: "n"}})
	dentest.Insert(t, tasks, bson.D{{Key: "queue", Value: "a name"}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}})
	dentest.Insert(t, tasks, bson.D{{Key: "queue", Value: b}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed}})
	for _, want := range []bson.ObjectID{a, b} {
		got, err := arrivals.Next(ctx)
		if err != nil || got != want {
			t.Fatalf("Next = %s, %v; want queue %s", got.Hex(), err, want.Hex())
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := arrivals.Next(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with its context done = %s, %v; want context.Canceled", got.Hex(), err)
	}
	if err := arrivals.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
