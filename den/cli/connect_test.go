package cli

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/den-project/den/den/dentest"
)

// den's writes ask for a majority's acknowledgement unless the URI names
// a write concern, which then wins; the server takes either.
func TestClientWriteConcern(t *testing.T) {
	for _, tc := range []struct {
		name, query, want string
	}{
		{"default", "", `{"w": "majority"}`},
		{"uri", "?w=1", `{"w": {"$numberInt":"1"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var sent []string
			monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
				if e.CommandName == "insert" || e.CommandName == "findAndModify" {
					mu.Lock()
					defer mu.Unlock()
					sent = append(sent, e.Command.Lookup("writeConcern").String())
				}
			}}
			db := dentest.DB(t)
			client, err := connect(strings.TrimSuffix(dentest.URI(), "/")+"/"+tc.query, "den test", monitor)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Disconnect(context.Background())
			c := client.Database(db.Name()).Collection("things")
			ctx := dentest.Context(t)
			if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
				t.Fatal(err)
			}
			if err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}).Err(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) != 2 {
				t.Fatalf("saw %d writes, want 2", len(sent))
			}
			for _, wc := range sent {
				if wc != tc.want {
					t.Fatalf("a write was sent with writeConcern %s, want %s", wc, tc.want)
				}
			}
		})
	}
}
