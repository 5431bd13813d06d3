package devdb

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/testdeadline"
	"github.com/den-project/den/den/internal/wire"
)

// commandDoc is an OP_MSG request with body doc.
func commandDoc(t *testing.T, id uint32, doc bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(b))
	binary.LittleEndian.PutUint32(msg[4:], id)
	binary.LittleEndian.PutUint32(msg[12:], wire.OpMsg)
	msg = append(msg, b...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// Reads take no lock: while a find is unanswered, a findAndModify of the
// same database reaches the server; while that write is unanswered,
// another read does too, but another write (an insert, an aggregate with
// $out) waits for it. Red with every command under the lock (the
// findAndModify never arrives while the find is held).
func TestReadsTakeNoLock(t *testing.T) {
	up := newHeldUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := newProxy(ln, "tcp", up.ln.Addr().String())
	served := make(chan struct{})
	go func() { defer close(served); p.serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	answered := make(chan string, 8)
	send := func(id uint32, what string, doc bson.D) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(commandDoc(t, id, append(doc, bson.E{Key: "$db", Value: "a"}))); err != nil {
			t.Fatal(err)
		}
		go func() {
			if _, err := wire.Read(c); err == nil {
				answered <- what
			}
		}()
	}
	arrives := func(what string) {
		t.Helper()
		select {
		case <-up.arrived:
		case <-testdeadline.GiveUp():
			t.Fatalf("%s did not reach the server by the test's deadline", what)
		}
	}
	users := func() int {
		p.locks.mu.Lock()
		defer p.locks.mu.Unlock()
		if d := p.locks.dbs["a"]; d != nil {
			return d.users
		}
		return 0
	}
	waitUsers := func(n int, what string) {
		t.Helper()
		if !testdeadline.Until(time.Millisecond, func() bool {
			select {
			case <-up.arrived:
				t.Fatalf("%s reached the server while a write was unanswered", what)
			default:
			}
			return users() == n
		}) {
			t.Fatalf("%s does not wait for the database's lock (%d users)", what, users())
		}
	}
	send(1, "find", bson.D{{Key: "find", Value: "tasks"}})
	arrives("a find")
	send(2, "findAndModify", bson.D{{Key: "findAndModify", Value: "tasks"}, {Key: "query", Value: bson.D{}}, {Key: "update", Value: bson.D{}}})
	arrives("a findAndModify while a find was unanswered")
	send(3, "aggregate", bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$match", Value: bson.D{}}}}}})
	arrives("an aggregate while a findAndModify was unanswered")
	send(4, "insert", bson.D{{Key: "insert", Value: "tasks"}, {Key: "documents", Value: bson.A{bson.D{}}}})
	waitUsers(2, "an insert")
	send(5, "$out", bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$out", Value: "x"}}}}})
	waitUsers(3, "an aggregate with $out")
	for range 3 {
		up.let("a")
	}
	arrives("the insert, once the findAndModify was answered")
	up.let("a")
	arrives("the $out, once the insert was answered")
	up.let("a")
	for range 5 {
		select {
		case <-answered:
		case <-testdeadline.GiveUp():
			t.Fatal("a command was not answered by the test's deadline")
		}
	}
}

// claimsFixture is a database through the proxy with queued tasks of one
// queue (and finished ones), and a claim as the protocol makes it.
type claimsFixture struct {
	srv   *Server
	db    *mongo.Database
	tasks *mongo.Collection
	qid   bson.ObjectID
}

// claimsQueued is how many tasks a claimsFixture queues.
const claimsQueued = 200

func newClaimsFixture(t *testing.T) *claimsFixture {
	t.Helper()
	srv, _ := startPG(t, Config{})
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.Background()) })
	f := &claimsFixture{srv: srv, db: client.Database("claims"), qid: bson.NewObjectID()}
	f.tasks = f.db.Collection("tasks")
	var docs []any
	for i := range claimsQueued + 300 {
		st, node := int32(-2), any(int32(-1))
		if i >= claimsQueued {
			st, node = 1, "earlier"
		}
		docs = append(docs, bson.D{{Key: "queue", Value: f.qid}, {Key: "status", Value: st}, {Key: "node", Value: node}, {Key: "parameters", Value: bson.D{{Key: "n", Value: i}}}})
	}
	if _, err := f.tasks.InsertMany(dentest.Context(t), docs); err != nil {
		t.Fatal(err)
	}
	return f
}

// claim takes the oldest queued task for node, as the protocol does.
func (f *claimsFixture) claim(t *testing.T, node string) (bson.ObjectID, bool) {
	var got struct {
		ID bson.ObjectID `bson:"_id"`
	}
	err := f.tasks.FindOneAndUpdate(dentest.Context(t), bson.D{{Key: "queue", Value: f.qid}, {Key: "status", Value: int32(-2)}, {Key: "node", Value: int32(-1)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(-1)}, {Key: "node", Value: node}}}},
		options.FindOneAndUpdate().SetSort(bson.D{{Key: "_id", Value: 1}})).Decode(&got)
	if err == mongo.ErrNoDocuments {
		return bson.ObjectID{}, false
	}
	if err != nil {
		t.Error(err)
		return bson.ObjectID{}, false
	}
	return got.ID, true
}

// On the real server, a read that takes long (held here by a PostgreSQL
// lock on its collection's table, as a long scan would hold it) does not
// delay a findAndModify of the same database. Red with reads under the
// lock: the findAndModify waits for the held find.
func TestSlowReadDoesNotDelayAClaim(t *testing.T) {
	f := newClaimsFixture(t)
	ctx := dentest.Context(t)
	if _, err := f.db.Collection("slow").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	pg := pgConn(t, f.srv)
	var table string
	if err := pg.QueryRow(ctx, `SELECT _jsonb->>'table' FROM claims._ferretdb_database_metadata WHERE _jsonb->>'_id' = 'slow'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	tx, err := pg.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, fmt.Sprintf(`LOCK TABLE claims.%q IN ACCESS EXCLUSIVE MODE`, table)); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- f.db.Collection("slow").FindOne(ctx, bson.D{{Key: "x", Value: 1}}).Err() }()
	// Watched from a connection of its own: pg_stat_activity holds still
	// within a transaction, so polled from pg's (in tx) it showed forever
	// what its first poll saw, before the find had reached the lock (a
	// hang to the test binary's deadline in CI).
	watch := pgConn(t, f.srv)
	dentest.Eventually(t, 10*time.Second, "the find on slow waits for its table", func() bool {
		var waiting bool
		err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%')`, table).Scan(&waiting)
		return err == nil && waiting
	})
	if _, ok := f.claim(t, "first"); !ok {
		t.Fatal("no claim while a find was held")
	}
	select {
	case err := <-held:
		t.Fatalf("the held find returned before its table was let go (%v): it proved nothing", err)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// 8 claimers, taking tasks with findAndModify while readers run finds,
// counts and aggregates beside them through the proxy, take every task
// once. Red with findAndModify among the reads: duplicates.
func TestClaimsStayAtomicBesideReads(t *testing.T) {
	f := newClaimsFixture(t)
	ctx := dentest.Context(t)
	stop := make(chan struct{})
	var reads atomic.Int64
	var readers sync.WaitGroup
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				switch r {
				case 0: // a page of the list: the fast path
					_, err = f.tasks.Find(ctx, bson.D{{Key: "queue", Value: f.qid}}, options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(50))
				case 1: // counts: the tally
					_, err = f.tasks.Aggregate(ctx, bson.A{bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$status"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}})
				case 2: // a search FerretDB decodes every task for
					_, err = f.tasks.CountDocuments(ctx, bson.D{{Key: "parameters.n", Value: bson.D{{Key: "$type", Value: "int"}}}})
				}
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	var mu sync.Mutex
	seen := map[bson.ObjectID]string{}
	var claimers sync.WaitGroup
	for c := range 8 {
		claimers.Add(1)
		go func() {
			defer claimers.Done()
			node := fmt.Sprintf("claimer-%d", c)
			for {
				id, ok := f.claim(t, node)
				if !ok {
					return
				}
				mu.Lock()
				if prev, dup := seen[id]; dup {
					t.Errorf("task %s claimed by %s and %s", id.Hex(), prev, node)
				}
				seen[id] = node
				mu.Unlock()
			}
		}()
	}
	claimers.Wait()
	close(stop)
	readers.Wait()
	if len(seen) != claimsQueued {
		t.Errorf("%d tasks claimed by the claimers, want %d", len(seen), claimsQueued)
	}
	if n, err := f.tasks.CountDocuments(ctx, bson.D{{Key: "status", Value: int32(-1)}}); err != nil || n != claimsQueued {
		t.Errorf("%d tasks claimed in the database (%v), want %d", n, err, claimsQueued)
	}
	if reads.Load() < 3 {
		t.Errorf("only %d reads ran beside the claims", reads.Load())
	}
	t.Logf("%d claims beside %d reads", len(seen), reads.Load())
}
