package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/relay"
)

func TestMain(m *testing.M) { dentest.Main(m, nil) }

// monitor records what a node-side client sends to the server.
type monitor struct {
	mu   sync.Mutex
	cmds []event.CommandStartedEvent
}

func (m *monitor) started(_ context.Context, e *event.CommandStartedEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmds = append(m.cmds, *e)
}

func (m *monitor) named(name string) []event.CommandStartedEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []event.CommandStartedEvent
	for _, c := range m.cmds {
		if c.CommandName == name {
			out = append(out, c)
		}
	}
	return out
}

// setup is a node-side client (its commands recorded), a relay on it
// serving one runner's control channel, and the runner's client, which
// reaches the server only through the relay.
type setup struct {
	node   *mongo.Client
	mon    *monitor
	relay  *relay.Relay
	dialer *relay.Dialer
	runner *mongo.Client
}

func newSetup(t *testing.T, fallback func(context.Context) (*mongo.Client, error)) *setup {
	t.Helper()
	s := &setup{mon: &monitor{}}
	var err error
	s.node, err = mongo.Connect(options.Client().ApplyURI(dentest.URI()).SetMonitor(&event.CommandMonitor{Started: s.mon.started}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.node.Disconnect(context.Background()) })
	log := zaptest.NewLogger(t)
	s.relay = relay.New(s.node, log)
	t.Cleanup(s.relay.Close)
	nodeEnd, runnerEnd, err := relay.ControlPair()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.relay.ServeControl(nodeEnd, log); err != nil {
		t.Fatal(err)
	}
	if fallback == nil {
		fallback = func(context.Context) (*mongo.Client, error) {
			return nil, errors.New("this test has no fallback")
		}
	}
	s.dialer, err = relay.NewDialer(runnerEnd, fallback, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.dialer.Close(context.Background()) })
	s.runner, err = mongo.Connect(options.Client().ApplyURI(relay.URI).SetDialer(s.dialer).SetRetryWrites(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.runner.Disconnect(context.Background()) })
	return s
}

// relayEnv is what the operations of TestOperationsThroughTheRelay share:
// the database directly and through the relay's runner, and its setup.
type relayEnv struct {
	ctx        context.Context
	direct, db *mongo.Database
	s          *setup
	coll       *mongo.Collection
}

// The operations a runner and its plugins use work through the relay:
// document sequences, cursors across batches, updates, aggregation, large
// inserts, errors with their codes, unacknowledged writes.
func TestOperationsThroughTheRelay(t *testing.T) {
	ctx := dentest.Context(t)
	direct := dentest.DB(t)
	s := newSetup(t, nil)
	db := s.runner.Database(direct.Name())
	e := relayEnv{ctx: ctx, direct: direct, db: db, s: s, coll: db.Collection("things")}
	// In order: each operation works on what the earlier ones left.
	for _, op := range []struct {
		name string
		run  func(*testing.T, relayEnv)
	}{
		{"insert many, find across batches", relayInsertMany},
		{"each cursor's getMore runs in the session of its find", relayCursorSessions},
		{"update and findOneAndUpdate", relayUpdates},
		{"aggregate", relayAggregate},
		{"GridFS-sized inserts in several batches", relayLargeInserts},
		{"errors arrive with their codes", relayErrorCodes},
		{"unacknowledged writes", relayUnacknowledged},
		{"transactions are refused", relayTransactionsRefused},
		{"handshakes and endSessions stay local", relayHandshakesLocal},
	} {
		t.Run(op.name, func(t *testing.T) { op.run(t, e) })
	}
}

// relayInsertMany is the operation "insert many, find across batches".
func relayInsertMany(t *testing.T, e relayEnv) {
	ctx, direct, s, coll := e.ctx, e.direct, e.s, e.coll
	docs := make([]any, 50)
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}, {Key: "group", Value: i % 3}}
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if n := dentest.Count(t, direct.Collection("things"), bson.D{}); n != 50 {
		t.Fatalf("server has %d documents, want 50", n)
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(7).SetSort(bson.D{{Key: "n", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for cur.Next(ctx) {
		if got := cur.Current.Lookup("n").AsInt64(); got != int64(want) {
			t.Fatalf("document %d has n=%d", want, got)
		}
		want++
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	cur.Close(ctx)
	if want != 50 {
		t.Fatalf("cursor returned %d documents, want 50", want)
	}
	if len(s.mon.named("getMore")) == 0 {
		t.Fatal("no getMore reached the server: the batches were not exercised")
	}
}

// relayCursorSessions is the operation "each cursor's getMore runs in the session of its find".
func relayCursorSessions(t *testing.T, e relayEnv) {
	ctx, s, db := e.ctx, e.s, e.db
	// Two cursors open at once: the runner's driver gives them two
	// sessions, and each getMore must reach the server in its own.
	for _, name := range []string{"left", "right"} {
		docs := make([]any, 20)
		for i := range docs {
			docs[i] = bson.D{{Key: "n", Value: i}}
		}
		if _, err := db.Collection(name).InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
	var curs []*mongo.Cursor
	for _, name := range []string{"left", "right"} {
		cur, err := db.Collection(name).Find(ctx, bson.D{}, options.Find().SetBatchSize(3))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(ctx)
		curs = append(curs, cur)
	}
	for n := 0; n < 20; n++ {
		for _, cur := range curs {
			if !cur.Next(ctx) {
				t.Fatalf("cursor ended after %d documents: %v", n, cur.Err())
			}
		}
	}
	lsid := func(e event.CommandStartedEvent) string { return string(e.Command.Lookup("lsid").Value) }
	findLsid := map[string]string{}
	for _, f := range s.mon.named("find") {
		if c, _ := f.Command.Lookup("find").StringValueOK(); c == "left" || c == "right" {
			findLsid[c] = lsid(f)
		}
	}
	if findLsid["left"] == "" {
		t.Skip("the server has no sessions: nothing to map")
	}
	if findLsid["left"] == findLsid["right"] {
		t.Fatal("two open cursors ran in the same server session")
	}
	seen := 0
	for _, g := range s.mon.named("getMore") {
		c, _ := g.Command.Lookup("collection").StringValueOK()
		if want, ok := findLsid[c]; ok {
			seen++
			if lsid(g) != want {
				t.Fatalf("a getMore on %s ran in session %x, its find in %x", c, lsid(g), want)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("%d getMores on the two cursors, want at least 10", seen)
	}
}

// relayUpdates is the operation "update and findOneAndUpdate".
func relayUpdates(t *testing.T, e relayEnv) {
	ctx, coll := e.ctx, e.coll
	res, err := coll.UpdateMany(ctx, bson.D{{Key: "group", Value: 0}}, bson.D{{Key: "$set", Value: bson.D{{Key: "seen", Value: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModifiedCount != 17 {
		t.Fatalf("updated %d documents, want 17", res.ModifiedCount)
	}
	var got struct{ N, Hits int }
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "n", Value: 5}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "hits", Value: 1}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&got)
	if err != nil {
		t.Fatal(err)
	}
	if got.N != 5 || got.Hits != 1 {
		t.Fatalf("findOneAndUpdate returned %+v", got)
	}
	if err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "n", Value: -1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("findOneAndUpdate of nothing: %v, want ErrNoDocuments", err)
	}
}

// relayAggregate is the operation "aggregate".
func relayAggregate(t *testing.T, e relayEnv) {
	ctx, coll := e.ctx, e.coll
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "seen", Value: true}}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$group"}, {Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	}, options.Aggregate().SetBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		ID    int `bson:"_id"`
		Count int
	}
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].ID != 0 || out[0].Count != 17 {
		t.Fatalf("aggregate returned %+v", out)
	}
}

// relayLargeInserts is the operation "GridFS-sized inserts in several batches".
func relayLargeInserts(t *testing.T, e relayEnv) {
	ctx, direct, s, db := e.ctx, e.direct, e.s, e.db
	chunk := strings.Repeat("x", 255<<10)
	docs := make([]any, 70) // ~18 MB: more than one message
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}, {Key: "data", Value: chunk}}
	}
	before := len(s.mon.named("insert"))
	if _, err := db.Collection("chunks").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if n := dentest.Count(t, direct.Collection("chunks"), bson.D{}); n != 70 {
		t.Fatalf("server has %d chunks, want 70", n)
	}
	if got := len(s.mon.named("insert")) - before; got < 2 {
		t.Fatalf("%d insert commands reached the server, want the batch split in several", got)
	}
	var one struct{ Data string }
	if err := direct.Collection("chunks").FindOne(ctx, bson.D{{Key: "n", Value: 69}}).Decode(&one); err != nil || one.Data != chunk {
		t.Fatalf("chunk 69 read back with %d bytes (%v)", len(one.Data), err)
	}
}

// relayErrorCodes is the operation "errors arrive with their codes".
func relayErrorCodes(t *testing.T, e relayEnv) {
	ctx, direct, db := e.ctx, e.direct, e.db
	if _, err := direct.Collection("unique").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := db.Collection("unique").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("duplicate insert through the relay: %v, want a duplicate key error", err)
	}
	// A command error: the same code as the server gives a direct client.
	cmd := bson.D{{Key: "find", Value: "things"}, {Key: "filter", Value: "not a document"}}
	directErr := direct.RunCommand(ctx, cmd).Err()
	relayErr := db.RunCommand(ctx, cmd).Err()
	var de, re mongo.CommandError
	if !errors.As(directErr, &de) || !errors.As(relayErr, &re) {
		t.Fatalf("want command errors: direct %v, relay %v", directErr, relayErr)
	}
	if re.Code != de.Code || re.Code == 0 {
		t.Fatalf("relay error code %d (%s), direct %d (%s)", re.Code, re.Name, de.Code, de.Name)
	}
}

// relayUnacknowledged is the operation "unacknowledged writes".
func relayUnacknowledged(t *testing.T, e relayEnv) {
	ctx, direct, db := e.ctx, e.direct, e.db
	w0 := db.Collection("w0", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	for i := range 5 {
		if _, err := w0.InsertOne(ctx, bson.D{{Key: "n", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	dentest.Eventually(t, time.Minute, "5 unacknowledged inserts on the server", func() bool {
		return dentest.Count(t, direct.Collection("w0"), bson.D{}) == 5
	})
	// The connection is still in step: an acknowledged command works.
	if err := db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// relayTransactionsRefused is the operation "transactions are refused".
func relayTransactionsRefused(t *testing.T, e relayEnv) {
	ctx, direct, s, db := e.ctx, e.direct, e.s, e.db
	sess, err := s.runner.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.EndSession(ctx)
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		return db.Collection("txn").InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
	})
	if err == nil {
		t.Fatal("a transaction ran through the relay")
	}
	if n := dentest.Count(t, direct.Collection("txn"), bson.D{}); n != 0 {
		t.Fatalf("the refused transaction wrote %d documents", n)
	}
}

// relayHandshakesLocal is the operation "handshakes and endSessions stay local".
func relayHandshakesLocal(t *testing.T, e relayEnv) {
	ctx, s := e.ctx, e.s
	if err := s.runner.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"endSessions", "isMaster", "ismaster"} {
		if got := s.mon.named(name); len(got) != 0 {
			t.Fatalf("%d %s commands reached the server", len(got), name)
		}
	}
	if got := s.mon.named("hello"); len(got) > 1 {
		t.Fatalf("%d hello commands reached the server, want at most the relay's one", len(got))
	}
}

// When the node's end of the control channel goes away (the node stopped
// or restarts), the runner's client goes on through a relay of its own.
func TestFallbackWhenTheNodeIsGone(t *testing.T) {
	ctx := dentest.Context(t)
	direct := dentest.DB(t)
	var fallbacks int
	s := newSetup(t, func(context.Context) (*mongo.Client, error) {
		fallbacks++
		return mongo.Connect(options.Client().ApplyURI(dentest.URI()))
	})
	coll := s.runner.Database(direct.Name()).Collection("c")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if s.dialer.Direct() {
		t.Fatal("the dialer went direct while the node was there")
	}
	s.relay.Close() // the node is gone: its connections and control channel close
	// Nothing was in flight, so nothing fails: the write on the pooled
	// connection the node closed goes to the local relay instead.
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 2}}); err != nil {
		t.Fatalf("the first insert after the node left: %v", err)
	}
	if !s.dialer.Direct() || fallbacks != 1 {
		t.Fatalf("direct %v after %d fallback connects, want true after 1", s.dialer.Direct(), fallbacks)
	}
	if n := dentest.Count(t, direct.Collection("c"), bson.D{}); n < 2 {
		t.Fatalf("server has %d documents, want at least 2", n)
	}
}
