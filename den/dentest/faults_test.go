package dentest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
)

func TestMain(m *testing.M) { dentest.Main(m, nil) }

// through returns the collection name of db as seen through the proxy p.
func through(t *testing.T, p *dentest.FaultProxy, db *mongo.Database, coll string) *mongo.Collection {
	return p.Client(t).Database(db.Name()).Collection(coll)
}

// has reports whether the collection holds a document with _id id, read
// straight from the server.
func has(t *testing.T, db *mongo.Database, coll string, id any) bool {
	t.Helper()
	n, err := db.Collection(coll).CountDocuments(dentest.Context(t), bson.D{{Key: "_id", Value: id}})
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A lost reply: the write is applied, the client sees a network error
// (the driver does not retry it: the test server is a standalone to it).
func TestFaultLoseReply(t *testing.T) {
	db := dentest.DB(t)
	p := dentest.Faults(t, 1, dentest.Rule{Command: "insert", Collection: "things", Fault: dentest.LoseReply, Nth: 1})
	c := through(t, p, db, "things")
	_, err := c.InsertOne(dentest.Context(t), bson.D{{Key: "_id", Value: 1}})
	if !mongo.IsNetworkError(err) {
		t.Fatalf("insert with its reply lost: got %v, want a network error", err)
	}
	if !has(t, db, "things", 1) {
		t.Fatal("the insert whose reply was lost was not applied")
	}
	if got := p.Injected(); len(got) != 1 || got[0].Command != "insert" || got[0].Collection != "things" || got[0].Fault != dentest.LoseReply {
		t.Fatalf("injected %v", got)
	}
	// The next command goes through on a new connection.
	if _, err := c.InsertOne(dentest.Context(t), bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
}

// The errors of a member that is no longer primary: not forwarded, with
// their codes and the RetryableWriteError label; not retried by the driver.
func TestFaultRetryableErrors(t *testing.T) {
	for _, tc := range []struct {
		fault dentest.Fault
		code  int
	}{{dentest.NotWritablePrimary, 10107}, {dentest.ReplStateChange, 11602}} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			db := dentest.DB(t)
			p := dentest.Faults(t, 1, dentest.Rule{Command: "update", Collection: "things", Fault: tc.fault, Nth: 1})
			c := through(t, p, db, "things")
			ctx := dentest.Context(t)
			_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, upsert())
			var se mongo.ServerError
			if !errors.As(err, &se) || !se.HasErrorCode(tc.code) || !se.HasErrorLabel("RetryableWriteError") {
				t.Fatalf("update: got %v, want code %d labelled RetryableWriteError", err, tc.code)
			}
			if has(t, db, "things", 1) {
				t.Fatal("the refused update was applied")
			}
			if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, upsert()); err != nil {
				t.Fatalf("the next update: %v", err)
			}
			if !has(t, db, "things", 1) {
				t.Fatal("the next update was not applied")
			}
		})
	}
}

// A connection dropped before the command: nothing applied, a network
// error for a write; a read is retried by the driver and succeeds.
func TestFaultDropBefore(t *testing.T) {
	db := dentest.DB(t)
	p := dentest.Faults(t, 1,
		dentest.Rule{Command: "delete", Collection: "things", Fault: dentest.DropBefore, Nth: 1},
		dentest.Rule{Command: "find", Collection: "things", Fault: dentest.DropBefore, Nth: 1})
	if _, err := db.Collection("things").InsertOne(dentest.Context(t), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	c := through(t, p, db, "things")
	_, err := c.DeleteOne(dentest.Context(t), bson.D{{Key: "_id", Value: 1}})
	if !mongo.IsNetworkError(err) {
		t.Fatalf("delete on a dropped connection: got %v, want a network error", err)
	}
	if !has(t, db, "things", 1) {
		t.Fatal("the delete was applied though its connection dropped before it")
	}
	var doc bson.M
	if err := c.FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: 1}}).Decode(&doc); err != nil {
		t.Fatalf("a find on a dropped connection is retried and succeeds: %v", err)
	}
	if got := len(p.Injected()); got != 2 {
		t.Fatalf("injected %d faults, want 2", got)
	}
}

// A delayed reply comes, after the delay; rules name a collection.
func TestFaultDelay(t *testing.T) {
	db := dentest.DB(t)
	const delay = time.Second
	p := dentest.Faults(t, 1, dentest.Rule{Command: "insert", Collection: "slow", Fault: dentest.Delay, Nth: 1, Delay: delay})
	ctx := dentest.Context(t)
	if _, err := through(t, p, db, "other").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := len(p.Injected()); got != 0 {
		t.Fatalf("a rule for collection slow injected %d faults into collection other", got)
	}
	c := through(t, p, db, "slow")
	start := time.Now()
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("the delayed insert answered after %s, before the delay (%s)", took, delay)
	}
}

// A rate draws from the seed: the same seed faults the same commands of a
// sequence, another seed others.
func TestFaultRateIsSeeded(t *testing.T) {
	db := dentest.DB(t)
	failed := func(seed uint64) []int {
		p := dentest.Faults(t, seed, dentest.Rule{Command: "insert", Fault: dentest.NotWritablePrimary, Rate: 0.3})
		c := through(t, p, db, "things")
		var out []int
		for i := range 40 {
			if _, err := c.InsertOne(dentest.Context(t), bson.D{{Key: "seed", Value: int64(seed)}, {Key: "i", Value: i}}); err != nil {
				out = append(out, i)
			}
		}
		if len(p.Injected()) != len(out) {
			t.Fatalf("seed %d: %d faults injected, %d inserts failed", seed, len(p.Injected()), len(out))
		}
		return out
	}
	a, b, other := failed(7), failed(7), failed(8)
	if len(a) == 0 || len(a) == 40 {
		t.Fatalf("a rate of 0.3 failed %d inserts of 40", len(a))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 failed inserts %v, then %v", a, b)
	}
	if slices.Equal(a, other) {
		t.Fatalf("seeds 7 and 8 failed the same inserts %v", a)
	}
}

// An election: the first command on a connection the client holds is
// refused with the error of a member that is not primary; then the driver
// finds no primary (handshakes are dropped) and nothing is applied; after
// it, everything is served again.
func TestFaultRefuse(t *testing.T) {
	db := dentest.DB(t)
	p := dentest.Faults(t, 1)
	c := through(t, p, db, "things")
	ctx := dentest.Context(t)
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	p.Refuse(time.Hour)
	_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(10107) || !se.HasErrorLabel("RetryableWriteError") {
		t.Fatalf("insert during an election: got %v, want NotWritablePrimary", err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.InsertOne(short, bson.D{{Key: "_id", Value: 2}}); err == nil {
		t.Fatal("a second insert succeeded during the election")
	}
	if err := c.FindOne(short, bson.D{{Key: "_id", Value: 1}}).Err(); err == nil {
		t.Fatal("a find succeeded during the election")
	}
	if has(t, db, "things", 2) {
		t.Fatal("an insert refused during the election was applied")
	}
	if p.Refused() < 1 {
		t.Fatalf("refused %d commands, want at least 1", p.Refused())
	}
	p.Refuse(0)
	dentest.Eventually(t, time.Minute, "an insert after the election", func() bool {
		_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
		return err == nil
	})
}

func upsert() *options.UpdateOneOptionsBuilder { return options.UpdateOne().SetUpsert(true) }
