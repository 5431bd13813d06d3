package devdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// fastFixture is a server with two databases of tasks: good holds good
// tasks only, mixed the same kinds of tasks and the hostile corpus's
// documents that try the fields the fast paths read. Each is reached
// through the proxy and around it (FerretDB's own answers).
type fastFixture struct {
	srv                *Server
	proxied, direct    *mongo.Client
	queues             []bson.ObjectID // the good tasks' queues; the last is the hostile corpus's
	mid                bson.ObjectID   // an _id among the good tasks
	start              time.Time       // the good tasks' first ctime
	goodTasks, hostile int
}

// fastHostile are the hostile documents of the fixture's mixed database:
// those whose _id, queue, status, node, parameters, ctime or mtime is odd,
// and a deep one (not the 4 MiB one: every command FerretDB answers would
// decode it, twice per case).
func fastHostile(qid bson.ObjectID) []bson.D {
	var out []bson.D
	for _, h := range dentest.HostileTasks(qid, "n1", bson.D{{Key: "n", Value: 0}}) {
		for _, p := range []string{"task _id ", "task queue ", "task status ", "task node ", "task parameters ", "task ctime ", "task mtime ",
			"task status -1 queue ", "task status -1 node ", "task status 0 queue ", "task status 0 node ", "task with parameters 95"} {
			if strings.HasPrefix(h.What, p) {
				out = append(out, h.Doc)
				break
			}
		}
	}
	return out
}

// newFastFixture starts the server and fills its databases (mixed only
// when asked).
func newFastFixture(t *testing.T, mixed bool) *fastFixture {
	t.Helper()
	srv, _ := startPG(t, Config{})
	connect := func(uri string) *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		return c
	}
	f := &fastFixture{srv: srv, proxied: connect(srv.URI()), direct: connect(srv.DirectURI()), start: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
	for range 4 {
		f.queues = append(f.queues, bson.NewObjectID())
	}
	ctx := dentest.Context(t)
	good := f.goodDocs()
	f.goodTasks = len(good)
	f.mid = good[len(good)/2][0].Value.(bson.ObjectID)
	// good: the indexes (and so the tally) first, then every task
	// through the triggers.
	if _, err := queue.NewStore(f.proxied.Database("good")).EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	f.insert(t, "good", good)
	dbs := []string{"good"}
	if mixed {
		// mixed: the tasks first, then the indexes: the tally counts them
		// when it is made.
		hostile := fastHostile(f.queues[3])
		f.insert(t, "mixed", f.goodDocs())
		for _, h := range hostile {
			// One at a time: some make FerretDB drop the connection.
			if _, err := f.direct.Database("mixed").Collection("tasks").InsertOne(ctx, h); err == nil {
				f.hostile++
			}
		}
		if _, err := queue.NewStore(f.proxied.Database("mixed")).EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		if f.hostile < len(hostile)/2 {
			t.Fatalf("FerretDB took %d hostile documents of %d", f.hostile, len(hostile))
		}
		dbs = append(dbs, "mixed")
	}
	// Changes after the tally was made: updates and deletes through the
	// triggers.
	for _, db := range dbs {
		tasks := f.proxied.Database(db).Collection("tasks")
		up, err := tasks.UpdateMany(ctx, bson.D{{Key: "status", Value: int32(-1)}, {Key: "queue", Value: f.queues[1]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(0)}}}})
		if err != nil || up.ModifiedCount == 0 {
			t.Fatalf("update: %v, %+v", err, up)
		}
		del, err := tasks.DeleteMany(ctx, bson.D{{Key: "status", Value: int32(-5)}, {Key: "queue", Value: f.queues[0]}})
		if err != nil || del.DeletedCount == 0 {
			t.Fatalf("delete: %v, %+v", err, del)
		}
	}
	return f
}

// goodDocs are the good tasks: 300, in four queues, of every status.
func (f *fastFixture) goodDocs() []bson.D {
	statuses := []int32{-2, -1, 0, 1, 1, 1, 2, -6, -5, 3}
	var out []bson.D
	for i := range 300 {
		st := statuses[i%len(statuses)]
		var node any = fmt.Sprintf("n%d", 1+i%3)
		if st <= -2 && st != -6 && st != -5 {
			node = int32(-1)
		}
		at := f.start.Add(time.Duration(i) * time.Second)
		out = append(out, bson.D{
			{Key: "_id", Value: bson.NewObjectIDFromTimestamp(at)}, {Key: "queue", Value: f.queues[i%len(f.queues)]},
			{Key: "status", Value: st}, {Key: "node", Value: node},
			{Key: "parameters", Value: bson.D{{Key: "n", Value: int32(i)}, {Key: "name", Value: fmt.Sprintf("task-%d", i%7)}}},
			{Key: "ctime", Value: at}, {Key: "mtime", Value: at},
			{Key: "stdout", Value: fmt.Sprintf("out %d", i)}, {Key: "stderr", Value: nil},
		})
	}
	return out
}

// insert inserts docs around the proxy and returns how many FerretDB took
// (it refuses some types).
func (f *fastFixture) insert(t *testing.T, db string, docs []bson.D) int {
	t.Helper()
	all := make([]any, len(docs))
	for i, d := range docs {
		all[i] = d
	}
	res, err := f.direct.Database(db).Collection("tasks").InsertMany(dentest.Context(t), all, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if err != nil && !errors.As(err, &bwe) {
		t.Fatal(err)
	}
	if res == nil {
		return len(docs) - len(bwe.WriteErrors)
	}
	return len(res.InsertedIDs)
}

// run runs cmd on database db through c: the reply, or the error's code.
func run(t *testing.T, c *mongo.Client, db string, cmd bson.D) (bson.Raw, int32) {
	t.Helper()
	raw, err := c.Database(db).RunCommand(dentest.Context(t), cmd).Raw()
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return nil, ce.Code
	}
	if err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
	return raw, 0
}

// answered counts the commands the fast paths answered.
func (f *fastFixture) answered() int64 { return fastAnswered(f.srv) }

// fastAnswered counts the commands srv's fast paths answered.
func fastAnswered(srv *Server) int64 {
	a, _ := srv.proxy.fast.counts()
	var n int64
	for _, v := range a {
		n += v
	}
	return n
}

// compare runs cmd through the proxy and around it on database db and
// fails the test when the answers differ: byte for byte for a find and a
// count, as a set of groups for an aggregate (whose groups have no
// order). A find with no sort is compared with FerretDB's answer sorted
// on _id, the order the fast path gives. It returns whether the fast path
// answered.
func (f *fastFixture) compare(t *testing.T, db string, cmd bson.D) bool {
	t.Helper()
	before := f.answered()
	got, gotCode := run(t, f.proxied, db, cmd)
	fast := f.answered() > before
	ref := cmd
	if fast && cmd[0].Key == "find" && !slices.ContainsFunc(cmd, func(e bson.E) bool { return e.Key == "sort" }) {
		ref = append(slices.Clone(cmd), bson.E{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}})
	}
	want, wantCode := run(t, f.direct, db, ref)
	if gotCode != wantCode {
		t.Fatalf("%s: error code %d through the proxy, %d from FerretDB", db, gotCode, wantCode)
	}
	if got == nil {
		return fast
	}
	if cmd[0].Key == "aggregate" {
		g, w := groupsOf(t, got), groupsOf(t, want)
		if !slices.Equal(g, w) {
			t.Errorf("%s (fast path: %v): groups\n%v\nfrom FerretDB\n%v", db, fast, g, w)
		}
		return fast
	}
	if spent(cmd, want) {
		// FerretDB leaves a cursor open when its first batch holds the
		// whole limit; its getMore finds nothing. MongoDB closes it,
		// and so does the fast path.
		want = closedCursor(want)
	}
	if !bytes.Equal(openCursor(got), openCursor(want)) {
		t.Errorf("%s (fast path: %v): answer\n%s\nfrom FerretDB\n%s", db, fast, got, want)
	}
	return fast
}

// openCursor is a reply with its cursor's id, when not 0, made 1: two
// servers' cursors have ids of their own.
func openCursor(reply bson.Raw) bson.Raw {
	id, ok := reply.Lookup("cursor", "id").Int64OK()
	if !ok || id == 0 {
		return reply
	}
	return withCursorID(reply, 1)
}

// withCursorID is a reply with its cursor's id made id.
func withCursorID(reply bson.Raw, id int64) bson.Raw {
	var d bson.D
	if bson.Unmarshal(reply, &d) != nil || len(d) == 0 || d[0].Key != "cursor" {
		return reply
	}
	c := d[0].Value.(bson.D)
	for i := range c {
		if c[i].Key == "id" {
			c[i].Value = id
		}
	}
	out, _ := bson.Marshal(d)
	return out
}

// spent reports whether a find's reply holds as many documents as its
// limit asks for: its cursor has nothing more to give.
func spent(cmd bson.D, reply bson.Raw) bool {
	var limit int64
	for _, e := range cmd {
		if e.Key == "limit" {
			limit, _ = e.Value.(int64)
		}
	}
	batch, err := reply.LookupErr("cursor", "firstBatch")
	arr, ok := batch.ArrayOK()
	if err != nil || !ok || limit <= 0 {
		return false
	}
	docs, err := arr.Values()
	return err == nil && int64(len(docs)) == limit
}

// closedCursor is a reply with its cursor's id made 0.
func closedCursor(reply bson.Raw) bson.Raw {
	return withCursorID(reply, 0)
}

// groupsOf is an aggregate's reply with its groups in order.
func groupsOf(t *testing.T, reply bson.Raw) []string {
	t.Helper()
	batch, err := reply.LookupErr("cursor", "firstBatch")
	if err != nil {
		t.Fatalf("no first batch in %s", reply)
	}
	vals, _ := batch.Array().Values()
	out := []string{fmt.Sprintf("id %v ns %v ok %v", reply.Lookup("cursor", "id"), reply.Lookup("cursor", "ns"), reply.Lookup("ok"))}
	for _, v := range vals {
		out = append(out, v.String())
	}
	slices.Sort(out[1:])
	return out
}

// fastCase is a command and whether the fast path answers it in the good
// database (in the mixed one, it may forward what the corpus makes
// undecidable).
type fastCase struct {
	name string
	cmd  bson.D
	fast bool
}

// find is a find command on tasks.
func find(filter bson.D, opts ...bson.E) bson.D {
	return append(bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: filter}}, opts...)
}

var (
	desc  = bson.E{Key: "sort", Value: bson.D{{Key: "_id", Value: -1}}}
	asc   = bson.E{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}}
	limit = func(n int) bson.E { return bson.E{Key: "limit", Value: int64(n)} }
)

// findCases are the finds tried: den's lists, a user's searches, and the
// ones the fast path must leave to FerretDB.
func (f *fastFixture) findCases() []fastCase {
	q := f.queues
	noOutput := bson.E{Key: "projection", Value: bson.D{{Key: "stdout", Value: 0}, {Key: "stderr", Value: 0}, {Key: "history", Value: 0}}}
	in := func(vs ...any) bson.D { return bson.D{{Key: "$in", Value: bson.A(vs)}} }
	// all: every match, hostile documents included, in one batch.
	all := []bson.E{limit(1000), {Key: "batchSize", Value: int32(1000)}}
	return []fastCase{
		{"a queue's newest", find(bson.D{{Key: "queue", Value: q[0]}}, desc, limit(20), noOutput), true},
		{"a queue's failed", find(bson.D{{Key: "queue", Value: q[1]}, {Key: "status", Value: int32(2)}}, desc, limit(50)), true},
		{"queues and statuses", find(bson.D{{Key: "queue", Value: in(q[0], q[2], q[3])}, {Key: "status", Value: in(1, 2, -6)}}, desc, limit(30), noOutput), true},
		{"queued, oldest first", find(bson.D{{Key: "status", Value: int32(-2)}}, asc, limit(10)), true},
		{"a node's, skipped", find(bson.D{{Key: "node", Value: "n1"}}, desc, limit(5), bson.E{Key: "skip", Value: int64(3)}), true},
		{"a node's failures", find(bson.D{{Key: "node", Value: "n2"}, {Key: "status", Value: int32(2)}}, desc, limit(100)), true},
		{"the page before", find(bson.D{{Key: "queue", Value: q[0]}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: f.mid}}}}, desc, limit(10)), true},
		{"the page after", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: f.mid}}}}, asc, limit(10)), true},
		{"since", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: bson.NewObjectIDFromTimestamp(f.start.Add(100 * time.Second))}}}, {Key: "status", Value: in(1, 2)}}, desc, limit(15)), true},
		{"a status group", find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 2}}}}, bson.D{{Key: "status", Value: -6}}}}}, desc, limit(20)), true},
		{"a parameter's range", find(bson.D{{Key: "parameters.n", Value: bson.D{{Key: "$gte", Value: 100}, {Key: "$lt", Value: 150}}}}, desc, limit(10)), true},
		{"a parameter's value, unsorted", find(bson.D{{Key: "parameters.name", Value: "task-3"}}, limit(7)), true},
		{"created after, unsorted", find(bson.D{{Key: "queue", Value: q[2]}, {Key: "ctime", Value: bson.D{{Key: "$gt", Value: f.start.Add(200 * time.Second)}}}}, limit(25)), true},
		{"null and $ne", find(bson.D{{Key: "queue", Value: q[0]}, {Key: "stderr", Value: nil}, {Key: "node", Value: bson.D{{Key: "$ne", Value: "n1"}}}}, desc, limit(10)), true},
		{"$exists and $nin", find(bson.D{{Key: "mtime", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{1, 2}}}}}, desc, limit(40)), true},
		{"everything", find(bson.D{}, desc, limit(15)), true},
		{"a projection of two fields", find(bson.D{{Key: "queue", Value: q[3]}}, desc, limit(12), bson.E{Key: "projection", Value: bson.D{{Key: "status", Value: 1}, {Key: "queue", Value: true}}}), true},
		{"a projection without _id", find(bson.D{{Key: "status", Value: int32(0)}}, asc, limit(12), bson.E{Key: "projection", Value: bson.D{{Key: "_id", Value: 0}, {Key: "node", Value: 1}}}), true},
		{"one batch of a smaller size", find(bson.D{{Key: "status", Value: int32(1)}}, desc, limit(20), bson.E{Key: "batchSize", Value: int32(10)}, bson.E{Key: "singleBatch", Value: true}), true},
		{"an $and", find(bson.D{{Key: "$and", Value: bson.A{bson.D{{Key: "queue", Value: q[1]}}, bson.D{{Key: "status", Value: bson.D{{Key: "$lte", Value: 0}}}}}}}, desc, limit(10)), true},
		{"no match", find(bson.D{{Key: "queue", Value: bson.NewObjectID()}}, desc, limit(10)), true},
		// Among the corpus's odd types (an ObjectId _id keeps the
		// documents of other _id types out): SQL's jsonb equalities and
		// ranges hold for values of other types (a number for a date's
		// milliseconds, a string for an ObjectId's hex), which FerretDB
		// rejects.
		{"dates among odd types", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: f.mid}}}, {Key: "ctime", Value: bson.D{{Key: "$gte", Value: f.start}}}}, append(all, desc)...), true},
		{"statuses among odd types", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: f.mid}}}, {Key: "status", Value: in(-2, 0, 1.0)}}, append(all, asc)...), true},
		{"a queue among odd types", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: f.mid}}}, {Key: "queue", Value: q[3]}}, append(all, desc, noOutput)...), true},
		{"nodes among odd types", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: f.mid}}}, {Key: "node", Value: bson.D{{Key: "$lt", Value: "n2"}}}}, append(all, desc)...), true},
		// Left to FerretDB.
		{"a batch smaller than the matches", find(bson.D{{Key: "status", Value: int32(1)}}, desc, limit(20), bson.E{Key: "batchSize", Value: int32(10)}), false},
		{"sorted on another field", find(bson.D{{Key: "queue", Value: q[0]}}, bson.E{Key: "sort", Value: bson.D{{Key: "ctime", Value: -1}}}, limit(10)), false},
		{"no limit, a queue's", find(bson.D{{Key: "queue", Value: q[0]}}, desc), true},
		{"no limit, a node's claimed tasks", find(bson.D{{Key: "node", Value: bson.D{{Key: "$eq", Value: "n1"}}}, {Key: "status", Value: int32(0)}}, bson.E{Key: "batchSize", Value: int32(100000)}), true},
		{"no limit, every task", find(bson.D{}, bson.E{Key: "batchSize", Value: int32(100000)}), true},
		{"a limit too large", find(bson.D{}, desc, limit(1001)), false},
		{"a regular expression", find(bson.D{{Key: "node", Value: bson.Regex{Pattern: "^n"}}}, desc, limit(10)), false},
		{"$type", find(bson.D{{Key: "status", Value: bson.D{{Key: "$type", Value: "int"}}}}, desc, limit(10)), true},
		{"$type string among queued tasks", find(bson.D{{Key: "node", Value: bson.D{{Key: "$in", Value: bson.A{-1, nil}}}}, {Key: "status", Value: int32(-2)},
			{Key: "parameters.name", Value: bson.D{{Key: "$type", Value: "string"}}}}, limit(10)), true},
		{"$type objectId, date", find(bson.D{{Key: "queue", Value: bson.D{{Key: "$type", Value: "objectId"}}}, {Key: "mtime", Value: bson.D{{Key: "$type", Value: "date"}}}}, desc, limit(20)), true},
		{"a batch as long as the limit", find(bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}}, limit(20), bson.E{Key: "batchSize", Value: int32(20)}), true},
		{"a batch shorter than the limit", find(bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}}, limit(40), bson.E{Key: "batchSize", Value: int32(20)}), false},
		{"$exists", find(bson.D{{Key: "node", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "status", Value: bson.D{{Key: "$exists", Value: true}}}}, desc, limit(30)), true},
		{"$exists false", find(bson.D{{Key: "node", Value: bson.D{{Key: "$exists", Value: false}}}}, limit(30)), true},
		{"$exists on a path", find(bson.D{{Key: "parameters.name", Value: bson.D{{Key: "$exists", Value: true}}}}, desc, limit(30)), true},
		{"$exists false on a path", find(bson.D{{Key: "parameters.name", Value: bson.D{{Key: "$exists", Value: false}}}}, limit(30)), true},
		{"$type double", find(bson.D{{Key: "status", Value: bson.D{{Key: "$type", Value: "double"}}}}, desc, limit(10)), false},
		{"$type of a number code", find(bson.D{{Key: "status", Value: bson.D{{Key: "$type", Value: 16}}}}, desc, limit(10)), false},
		{"a mixed projection", find(bson.D{}, desc, limit(10), bson.E{Key: "projection", Value: bson.D{{Key: "status", Value: 1}, {Key: "node", Value: 0}}}), false},
		{"rejects past the bound", find(bson.D{{Key: "stderr", Value: bson.D{{Key: "$ne", Value: nil}}}}, desc, limit(1)), false},
		{"an $or any document may pass beside conditions SQL compares", find(bson.D{{Key: "status", Value: int32(-2)},
			{Key: "$or", Value: bson.A{bson.D{{Key: "node", Value: nil}}, bson.D{{Key: "node", Value: bson.D{{Key: "$lte", Value: "n9"}}}}}}}, limit(5)), true},
		{"another collection", bson.D{{Key: "find", Value: "queues"}, {Key: "filter", Value: bson.D{}}, limit(5)}, false},
		// The sweep's (queue.NodeStore's Irregular and FreeEnded): a
		// null equality and a $not, which FerretDB decides on the
		// candidates the rest of the SQL leaves.
		{"null at the top level", find(bson.D{{Key: "status", Value: nil}}, desc, limit(10)), true},
		{"null at the top level, every match", find(bson.D{{Key: "status", Value: nil}}, append(all, desc)...), true},
		{"null on a path", find(bson.D{{Key: "parameters.name", Value: nil}, {Key: "status", Value: int32(-2)}}, append(all, asc)...), true},
		{"the sweep's irregular tasks", find(bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "queue", Value: in(q[0].Hex(), q[1].Hex())}, {Key: "status", Value: int32(-2)}},
			bson.D{{Key: "queue", Value: in(q[0], q[1])}, {Key: "status", Value: bson.D{{Key: "$type", Value: "string"}}}},
			bson.D{{Key: "queue", Value: in(q[0], q[1])}, {Key: "status", Value: nil}},
		}}}, limit(100)), true},
		{"$not", find(bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}, {Key: "ctime", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}}, append(all, desc)...), true},
		{"the sweep's ended unique keys", find(bson.D{{Key: "parameters.name", Value: "task-3"},
			{Key: "$or", Value: bson.A{bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}}, bson.D{{Key: "status", Value: in(-5, -6)}}}},
			{Key: "parameters.n", Value: bson.D{{Key: "$gt", Value: -1}}}, {Key: "mtime", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "string"}}}}}}, limit(1000)), true},
		{"$not of a regular expression", find(bson.D{{Key: "status", Value: int32(1)}, {Key: "node", Value: bson.D{{Key: "$not", Value: bson.Regex{Pattern: "^n1"}}}}}, desc, limit(20)), true},
	}
}

// countCases are the counts tried.
func (f *fastFixture) countCases() []fastCase {
	q := f.queues
	byQueueStatus := bson.D{{Key: "$group", Value: bson.D{
		{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}}},
		{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}
	agg := func(stages ...bson.D) bson.D {
		return bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A(toAny(stages))}, {Key: "cursor", Value: bson.D{}}}
	}
	match := func(filter bson.D) bson.D { return bson.D{{Key: "$match", Value: filter}} }
	group := func(id any) bson.D {
		return bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: id}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}
	}
	count := func(filter bson.D, opts ...bson.E) bson.D {
		return append(bson.D{{Key: "count", Value: "tasks"}, {Key: "query", Value: filter}}, opts...)
	}
	in := func(vs ...any) bson.D { return bson.D{{Key: "$in", Value: bson.A(vs)}} }
	return []fastCase{
		{"every queue by status", agg(byQueueStatus), true},
		{"some queues by status", agg(match(bson.D{{Key: "queue", Value: in(q[0], q[1])}}), byQueueStatus), true},
		{"running by queue and node", agg(match(bson.D{{Key: "queue", Value: in(q[0], q[1], q[2])}, {Key: "status", Value: in(-1, 0)}}),
			group(bson.D{{Key: "queue", Value: "$queue"}, {Key: "node", Value: "$node"}})), true},
		{"the nodes of running tasks", agg(match(bson.D{{Key: "status", Value: int32(0)}}), group("$node")), true},
		{"queues with queued tasks", agg(match(bson.D{{Key: "status", Value: int32(-2)}}), group("$queue")), true},
		{"by a one-field document", agg(group(bson.D{{Key: "st", Value: "$status"}})), true},
		{"the nodes of claimed and running tasks, no count", agg(match(bson.D{{Key: "status", Value: in(0, 1)}}), bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$node"}}}}), true},
		{"queues with queued tasks, no count", agg(match(bson.D{{Key: "status", Value: int32(-2)}}), bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$queue"}}}}), true},
		{"countDocuments", agg(match(bson.D{{Key: "queue", Value: q[2]}, {Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}}), group(int32(1))), true},
		{"countDocuments skipped and limited", agg(match(bson.D{{Key: "node", Value: "n1"}}), bson.D{{Key: "$skip", Value: int64(5)}}, bson.D{{Key: "$limit", Value: int64(30)}}, group(int32(1))), true},
		{"countDocuments of nothing", agg(match(bson.D{{Key: "queue", Value: bson.NewObjectID()}}), group(int32(1))), true},
		{"$or, $nor, $ne, $exists, $nin", agg(match(bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: 1}}}, {Key: "node", Value: bson.D{{Key: "$exists", Value: true}}}},
			bson.D{{Key: "$nor", Value: bson.A{bson.D{{Key: "queue", Value: bson.D{{Key: "$nin", Value: bson.A{q[0]}}}}}}}},
		}}}), group("$status")), true},
		{"null", agg(match(bson.D{{Key: "node", Value: nil}}), group("$queue")), true},
		{"count", count(bson.D{{Key: "queue", Value: q[1]}, {Key: "status", Value: int32(1)}}), true},
		{"count skipped and limited", count(bson.D{{Key: "status", Value: bson.D{{Key: "$lt", Value: 0}}}}, bson.E{Key: "skip", Value: int64(2)}, bson.E{Key: "limit", Value: int64(40)}), true},
		{"count all", count(bson.D{}), true},
		// A filter the tally does not decide: from the find path's matches.
		{"a filter on another field", agg(match(bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}}, {Key: "mtime", Value: bson.D{{Key: "$gte", Value: f.start}}}}), byQueueStatus), true},
		{"the queues of prioritized queued tasks", agg(match(bson.D{{Key: "status", Value: int32(-2)}, {Key: "priority", Value: bson.D{{Key: "$exists", Value: true}}},
			{Key: "queue", Value: in(q[0], q[1], q[2])}}), bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$queue"}}}}), true},
		{"countDocuments of a parameter, limited", agg(match(bson.D{{Key: "parameters.n", Value: bson.D{{Key: "$lt", Value: 50}}}}), bson.D{{Key: "$limit", Value: int64(3)}}, group(int32(1))), true},
		{"by node, a filter on another field", agg(match(bson.D{{Key: "mtime", Value: bson.D{{Key: "$gte", Value: f.start}}}, {Key: "status", Value: int32(1)}}), group("$node")), true},
		// Left to FerretDB.
		{"a filter the find path leaves too", agg(match(bson.D{{Key: "parameters.name", Value: bson.D{{Key: "$regex", Value: "^a"}}}}), group("$node")), false},
		{"a group by another field", agg(group("$parameters.name")), false},
		{"another accumulator", agg(bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$queue"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: "$status"}}}}}}), false},
		{"a sort", agg(byQueueStatus, bson.D{{Key: "$sort", Value: bson.D{{Key: "n", Value: -1}}}}), false},
		{"a count on another field", count(bson.D{{Key: "parameters.n", Value: 5}}), false},
	}
}

// toAny converts stages for bson.A.
func toAny(ds []bson.D) []any {
	out := make([]any, len(ds))
	for i, d := range ds {
		out[i] = d
	}
	return out
}

// The fast paths answer exactly what FerretDB answers, byte for byte (a
// find without a sort: in _id order; an aggregate's groups: in any
// order), on good tasks and on the hostile corpus, and answer the good
// tasks' lists and counts themselves while leaving the rest to FerretDB.
// Red (each tried): with a superset that leaves out arrays (mixed: tasks
// whose queue or status is an array holding the value are missing), with
// candidates read by _id alone, without the filter (FerretDB's judgement:
// 11 cases differ), without the check for _ids of other types (4 differ),
// with an exact condition that does not check the value's type (dates,
// statuses and nodes among odd types: a number taken for a date), with an
// int decoded as an int64 (every list differs), and with an update
// trigger that does not count (the counts after the fixture's updates
// differ).
func TestFastPathsAnswerAsFerretDB(t *testing.T) {
	f := newFastFixture(t, true)
	t.Logf("%d good tasks, %d hostile documents", f.goodTasks, f.hostile)
	for _, cases := range [][]fastCase{f.findCases(), f.countCases()} {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if fast := f.compare(t, "good", c.cmd); fast != c.fast {
					_, fw := f.srv.proxy.fast.counts()
					t.Errorf("good: answered by the fast path: %v, want %v (forwarded: %v)", fast, c.fast, fw)
				}
				f.compare(t, "mixed", c.cmd)
			})
		}
	}
	a, fw := f.srv.proxy.fast.counts()
	decoded, asked := f.srv.proxy.fast.decoded.Load(), f.srv.proxy.fast.asked.Load()
	t.Logf("answered %v; forwarded %v; candidates decoded %d, asked of FerretDB %d", a, fw, decoded, asked)
	if a["find"] == 0 || a["aggregate"] == 0 || a["count"] == 0 || decoded == 0 || asked == 0 {
		t.Errorf("the fast paths answered %v, decoded %d candidates and asked FerretDB for %d: a way untried", a, decoded, asked)
	}
}

// The tally is exact after every kind of write, the ones a node makes
// (claims, finishes), inserts and deletes of many at once, and a
// collection dropped and made again, or renamed and made again: each count
// and list through the proxy is FerretDB's own. Red with the tables of
// collections looked up once and kept (after the rename, the list read the
// renamed collection's table).
func TestTallyFollowsEveryWrite(t *testing.T) {
	f := newFastFixture(t, false)
	ctx := dentest.Context(t)
	tasks := f.proxied.Database("good").Collection("tasks")
	byQueueStatus := bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$group", Value: bson.D{
		{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}, {Key: "node", Value: "$node"}}},
		{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}}}, {Key: "cursor", Value: bson.D{}}}
	check := func(what string) {
		t.Helper()
		t.Run(what, func(t *testing.T) {
			if !f.compare(t, "good", byQueueStatus) {
				t.Errorf("not answered from the tally")
			}
		})
	}
	check("as inserted")
	for range 5 {
		var doc bson.M
		err := tasks.FindOneAndUpdate(ctx, bson.D{{Key: "status", Value: int32(-2)}, {Key: "node", Value: int32(-1)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(-1)}, {Key: "node", Value: "claimer"}}}}).Decode(&doc)
		if err != nil {
			t.Fatal(err)
		}
	}
	check("after claims")
	if _, err := tasks.UpdateMany(ctx, bson.D{{Key: "node", Value: "claimer"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int64(1)}}}}); err != nil {
		t.Fatal(err)
	}
	check("after finishes")
	if _, err := tasks.UpdateMany(ctx, bson.D{{Key: "node", Value: "n3"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: bson.A{"n3"}}}}}); err != nil {
		t.Fatal(err)
	}
	t.Run("an array where a group's value was", func(t *testing.T) {
		if f.compare(t, "good", byQueueStatus) {
			t.Errorf("answered from the tally with an array in node")
		}
	})
	if _, err := tasks.DeleteMany(ctx, bson.D{{Key: "node", Value: bson.A{"n3"}}}); err != nil {
		t.Fatal(err)
	}
	check("after deletes")
	if err := tasks.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	f.insert(t, "good", f.goodDocs()[:50])
	// The new table's tally comes with the sweep; until then the counts are
	// FerretDB's.
	f.compare(t, "good", byQueueStatus)
	dentest.Eventually(t, 10*time.Second, "the tally of the collection made again", func() bool { return f.compare(t, "good", byQueueStatus) })
	check("dropped and made again")
	// A collection renamed keeps its table (FerretDB renames it in its
	// metadata only); one made again under the old name gets another.
	if err := f.proxied.Database("admin").RunCommand(ctx, bson.D{{Key: "renameCollection", Value: "good.tasks"}, {Key: "to", Value: "good.old"}}).Err(); err != nil {
		t.Fatal(err)
	}
	f.insert(t, "good", f.goodDocs()[:30])
	dentest.Eventually(t, 10*time.Second, "the tally of the collection made under a renamed one's name", func() bool { return f.compare(t, "good", byQueueStatus) })
	t.Run("a list after a rename", func(t *testing.T) {
		if !f.compare(t, "good", find(bson.D{}, desc, limit(50))) {
			t.Errorf("not answered by the fast path")
		}
	})
}

// The tally stays exact under writers that run at once: four clients
// around the proxy (which would forward one write at a time), straight to
// FerretDB, each claiming, finishing, inserting (some of them refused as
// duplicates) and deleting tasks of the same queues, so that their
// statements change the same rows of the tally in the same moments. Every
// count through the proxy is then FerretDB's own, answered from the
// tally. Red with an update trigger that adds to the row as its
// statement's snapshot saw it (n = (SELECT n ...) + EXCLUDED.n, a lost
// update under PostgreSQL's read committed): the counts drifted.
func TestTallyExactUnderConcurrentWrites(t *testing.T) {
	f := newFastFixture(t, false)
	ctx := dentest.Context(t)
	tasks := f.direct.Database("good").Collection("tasks")
	const writers, rounds = 4, 40
	var wg sync.WaitGroup
	var done, failed atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("w%d", w)
			write := func(err error) {
				if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
					failed.Add(1)
					return
				}
				done.Add(1)
			}
			for i := range rounds {
				q := f.queues[(w+i)%3]
				var claimed bson.M
				write(tasks.FindOneAndUpdate(ctx, bson.D{{Key: "queue", Value: q}, {Key: "status", Value: int32(-2)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(-1)}, {Key: "node", Value: node}}}}).Decode(&claimed))
				_, err := tasks.UpdateMany(ctx, bson.D{{Key: "node", Value: node}, {Key: "status", Value: int32(-1)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(i % 3)}}}})
				write(err)
				id := bson.NewObjectID()
				newTask := bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: q}, {Key: "status", Value: int32(-2)}, {Key: "node", Value: int32(-1)}}
				_, err = tasks.InsertMany(ctx, []any{newTask, newTask, bson.D{{Key: "queue", Value: q}, {Key: "status", Value: int32(1)}, {Key: "node", Value: node}}},
					options.InsertMany().SetOrdered(false))
				var bwe mongo.BulkWriteException
				if errors.As(err, &bwe) && len(bwe.WriteErrors) == 1 {
					err = nil // the duplicate, refused
				}
				write(err)
				if i%4 == 3 {
					_, err = tasks.DeleteMany(ctx, bson.D{{Key: "node", Value: node}, {Key: "status", Value: int32(1)}})
					write(err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d writes done, %d failed", done.Load(), failed.Load())
	if failed.Load() > done.Load()/10 {
		t.Fatalf("%d of %d writes failed: the writers did not run", failed.Load(), done.Load()+failed.Load())
	}
	for _, c := range []struct {
		name string
		cmd  bson.D
	}{
		{"by queue, status and node", bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}, {Key: "node", Value: "$node"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}}}}, {Key: "cursor", Value: bson.D{}}}},
		{"count all", bson.D{{Key: "count", Value: "tasks"}, {Key: "query", Value: bson.D{}}}},
		{"count queued", bson.D{{Key: "count", Value: "tasks"}, {Key: "query", Value: bson.D{{Key: "status", Value: int32(-2)}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !f.compare(t, "good", c.cmd) {
				t.Errorf("not answered from the tally")
			}
		})
	}
}

// A data directory of an earlier den keeps its tallies, whose triggers
// call the tally's functions as that den made them: a start brings the
// functions up to date before any write reaches them. Here they are made
// as an earlier den had them (planned at every call, no plan_cache_mode
// of their own; the key's old function tally_v beside them), and the
// server started again: the functions are this den's, the old one is
// gone, and counts after more writes are still FerretDB's own. Red with
// the setup left out of the start (the functions stayed as they were).
func TestTallyFunctionsUpToDateAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, stop := startPG(t, Config{Dir: dir})
	ctx := dentest.Context(t)
	tasks := connect(t, srv).Database("old").Collection("tasks")
	if _, err := queue.NewStore(tasks.Database()).EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	q := bson.NewObjectID()
	for i := range 20 {
		if _, err := tasks.InsertOne(ctx, bson.D{{Key: "queue", Value: q}, {Key: "status", Value: int32(-2 + i%4)}, {Key: "node", Value: int32(-1)}}); err != nil {
			t.Fatal(err)
		}
	}
	conn := pgConn(t, srv)
	for _, stmt := range []string{
		`ALTER FUNCTION "den$devdb".tally_ins() RESET plan_cache_mode`,
		`ALTER FUNCTION "den$devdb".tally_upd() RESET plan_cache_mode`,
		`ALTER FUNCTION "den$devdb".tally_del() RESET plan_cache_mode`,
		`CREATE FUNCTION "den$devdb".tally_v(jsonb, text) RETURNS jsonb LANGUAGE sql AS 'SELECT $1'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn.Close(ctx)
	stop()

	srv, _ = startPG(t, Config{Dir: dir})
	rows, err := pgConn(t, srv).Query(ctx, `SELECT proname, coalesce(array_to_string(proconfig, ','), '')
		FROM pg_proc WHERE pronamespace = 'den$devdb'::regnamespace ORDER BY proname`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var name, config string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		got = append(got, name+" "+config)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tally_del plan_cache_mode=force_generic_plan", "tally_ins plan_cache_mode=force_generic_plan",
		"tally_trunc plan_cache_mode=force_generic_plan", "tally_upd plan_cache_mode=force_generic_plan",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the tally's functions after the start: %q; want %q", got, want)
	}
	directClient, err := mongo.Connect(options.Client().ApplyURI(srv.DirectURI()))
	if err != nil {
		t.Fatal(err)
	}
	defer directClient.Disconnect(context.Background())
	proxied, direct := connect(t, srv).Database("old").Collection("tasks"), directClient.Database("old").Collection("tasks")
	if _, err := proxied.UpdateMany(ctx, bson.D{{Key: "status", Value: int32(-2)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxied.DeleteMany(ctx, bson.D{{Key: "status", Value: int32(0)}}); err != nil {
		t.Fatal(err)
	}
	before := fastAnswered(srv)
	for _, st := range []int32{-2, -1, 0, 1} {
		filter := bson.D{{Key: "queue", Value: q}, {Key: "status", Value: st}}
		n, err := proxied.CountDocuments(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		m, err := direct.CountDocuments(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if n != m {
			t.Errorf("status %d: %d tasks by the tally, %d by FerretDB", st, n, m)
		}
	}
	if fastAnswered(srv) == before {
		t.Errorf("the counts were not answered from the tally")
	}
}

// pgConn connects to the server's PostgreSQL.
func pgConn(t *testing.T, srv *Server) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(dentest.Context(t), srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
