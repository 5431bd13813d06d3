package devdb_test

import (
	"context"
	"testing"

	"github.com/den-project/den/den/internal/testdeadline"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/devdb"
)

// The proxy counts what clients send through it, by command, and the
// direct URI goes around it uncounted.
func TestStatsCountCommandsAtTheWire(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	connect := func(uri string) *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		return c
	}
	direct := connect(srv.DirectURI()).Database("d").Collection("c")
	for range 3 {
		if _, err := direct.InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	before := srv.Stats()
	if before.Commands["insert"] != 0 {
		t.Fatalf("direct inserts were counted: %v", before.Commands)
	}
	proxied := connect(srv.URI()).Database("d").Collection("c")
	for range 2 {
		if err := proxied.FindOne(ctx, bson.D{}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := srv.Stats().Sub(before)
	if got.Commands["find"] != 2 {
		t.Errorf("find counted %d times, want 2 (%v)", got.Commands["find"], got.Commands)
	}
	if got.Busy["find c"] <= 0 || len(got.Busy) != 1 {
		t.Errorf("server time %v: want the two finds' time under \"find c\", and nothing else (handshakes are left out)", got.Busy)
	}
	if got.Connections < 1 || got.Total() < 3 {
		t.Errorf("stats %+v: want at least one connection and its handshake", got)
	}
}
