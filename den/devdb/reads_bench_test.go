package devdb

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BenchmarkDevReads measures the reads den's views make of den dev's
// database among many finished tasks: each through the proxy (the fast
// paths: "after") and straight to FerretDB around it (its own answer, as
// every read was answered before them: "before"), and the PostgreSQL
// plans of the lists' candidates (EXPLAIN ANALYZE, logged).
//
//	DEN_DEVDB_BENCH_TASKS=1000000 DEN_DEVDB_BENCH_DIR=/var/tmp/devreads \
//	  go test -run '^$' -bench BenchmarkDevReads -benchtime 1x -timeout 5h ./den/devdb
//
// DEN_DEVDB_BENCH_TASKS is how many tasks (default 100,000), as den leaves
// them (output inline, runner, usage), in 5 queues, on 4 nodes, 5 % of
// them failed and 0.1 % queued, spread over queues and nodes; DEN_DEVDB_BENCH_DIR keeps the database
// between runs (it is topped up to the number asked); without it, a
// temporary one. DEN_DEVDB_BENCH_BEFORE=0 skips FerretDB's own answers,
// which take over a minute each at a million tasks.
func BenchmarkDevReads(b *testing.B) {
	needPostgres(b)
	tasks := 100000
	if v := os.Getenv("DEN_DEVDB_BENCH_TASKS"); v != "" {
		var err error
		if tasks, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := os.Getenv("DEN_DEVDB_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	began := time.Now()
	srv, err := Start(ctx, Config{Dir: dir, Engine: EnginePostgreSQL})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); <-srv.Done() }()
	b.Logf("started in %s", time.Since(began).Round(time.Millisecond))
	connect := func(uri string) *mongo.Database {
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Disconnect(context.Background()) })
		return c.Database("scale")
	}
	proxied, direct := connect(srv.URI()), connect(srv.DirectURI())
	benchFill(b, direct, tasks)
	// The twins, list indexes and tally of a collection made by the
	// fill come with createIndexes (as den's indexes are made): the first
	// time, over every task, as the first start of a den dev whose tasks
	// are many.
	indexing := time.Now()
	if _, err := proxied.Collection("tasks").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "queue", Value: 1}, {Key: "status", Value: 1}}}); err != nil {
		b.Fatal(err)
	}
	b.Logf("createIndexes (indexing and counting the tasks, when not done before) in %s", time.Since(indexing).Round(time.Millisecond))
	targets := benchFind(b, proxied)
	for _, op := range benchOps(targets) {
		benchExplain(b, srv, op)
		for _, way := range []struct {
			name string
			db   *mongo.Database
		}{{"after", proxied}, {"before", direct}} {
			if way.name == "before" && os.Getenv("DEN_DEVDB_BENCH_BEFORE") == "0" {
				continue
			}
			b.Run(op.name+"/"+way.name, func(b *testing.B) {
				var docs int
				start := time.Now()
				for range b.N {
					raw, err := way.db.RunCommand(ctx, op.cmd).Raw()
					if err != nil {
						b.Fatal(err)
					}
					batch, _ := raw.Lookup("cursor", "firstBatch").ArrayOK()
					vals, _ := batch.Values()
					docs = len(vals)
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
				b.ReportMetric(float64(docs), "docs")
			})
		}
	}
	answered, forwarded := srv.proxy.fast.counts()
	b.Logf("fast paths answered %v, forwarded %v", answered, forwarded)
}

// benchOp is a read a view makes.
type benchOp struct {
	name string
	cmd  bson.D
}

// benchOps are the reads of den's views: pages of the task list and a
// queue's page, and the counts of the overview and `den status`.
func benchOps(t benchTargets) []benchOp {
	noOutput := bson.E{Key: "projection", Value: bson.D{{Key: "stdout", Value: 0}, {Key: "stderr", Value: 0}, {Key: "history", Value: 0}}}
	newest := bson.E{Key: "sort", Value: bson.D{{Key: "_id", Value: -1}}}
	find := func(filter bson.D, n int64) bson.D {
		return bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: filter}, newest, {Key: "limit", Value: n}, noOutput}
	}
	group := func(match bson.D, id any) bson.D {
		var pipeline bson.A
		if match != nil {
			pipeline = append(pipeline, bson.D{{Key: "$match", Value: match}})
		}
		pipeline = append(pipeline, bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: id}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}})
		return bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: pipeline}, {Key: "cursor", Value: bson.D{}}}
	}
	byQueueStatus := bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}}
	return []benchOp{
		{"list/newest-20", find(bson.D{}, 20)},
		{"list/queue-50", find(bson.D{{Key: "queue", Value: t.queue}}, 50)},
		{"list/queue-failed-50", find(bson.D{{Key: "queue", Value: t.failedQueue}, {Key: "status", Value: 2}}, 50)},
		{"list/queue-queued-50", find(bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: bson.A{t.queuedQueue}}}}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-2, -3, -4}}}}}, 50)},
		{"list/node-done-or-failed-100", find(bson.D{{Key: "node", Value: t.node}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}, 100)},
		{"list/node-failed-100", find(bson.D{{Key: "node", Value: t.failedNode}, {Key: "status", Value: 2}}, 100)},
		{"count/all-by-queue-and-status", group(nil, byQueueStatus)},
		{"count/queues-by-status", group(bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: bson.A{t.queue, t.failedQueue}}}}}, byQueueStatus)},
		{"count/countDocuments", group(bson.D{{Key: "queue", Value: t.queue}, {Key: "status", Value: 1}}, 1)},
	}
}

// benchFill tops the tasks of db up to n, in batches of 1,000.
func benchFill(b testing.TB, db *mongo.Database, n int) {
	ctx := context.Background()
	have, err := db.Collection("tasks").EstimatedDocumentCount(ctx)
	if err != nil {
		b.Fatal(err)
	}
	queues := make([]bson.ObjectID, 5)
	for i := range queues {
		queues[i] = bson.NewObjectID()
	}
	began := time.Now()
	docs := make([]any, 0, 1000)
	for i := int(have); i < n; i++ {
		at := time.Now().Add(-time.Hour)
		status := 1
		switch {
		case i%21 == 0:
			status = 2
		case i%997 == 1:
			status = -2
		}
		docs = append(docs, bson.D{
			{Key: "queue", Value: queues[i%len(queues)]}, {Key: "status", Value: status}, {Key: "node", Value: fmt.Sprintf("node%d", i%4)},
			{Key: "parameters", Value: bson.D{{Key: "commands", Value: "ab"}, {Key: "n", Value: i}}},
			{Key: "ctime", Value: at}, {Key: "mtime", Value: at},
			{Key: "stdout", Value: "This is command 'a' for apple.\n"}, {Key: "stderr", Value: "This is command 'b' for banana.\n"},
			{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "host", Value: "earlier"}, {Key: "pid", Value: 1000 + i},
				{Key: "started", Value: at}, {Key: "beat", Value: at}}},
			{Key: "usage", Value: bson.D{{Key: "cpu_user_s", Value: 0.001}, {Key: "cpu_system_s", Value: 0.001}, {Key: "max_rss_kb", Value: 9000}, {Key: "wall_s", Value: 0.01}}},
		})
		if len(docs) == cap(docs) || i == n-1 {
			if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	if int(have) < n {
		b.Logf("%d tasks inserted in %s", n-int(have), time.Since(began).Round(time.Second))
	}
}

// benchTargets are what the views look at: the largest queue, the queue
// with the most failed tasks and the one with the most queued, and the node
// with the most failed tasks.
type benchTargets struct {
	queue, failedQueue, queuedQueue bson.ObjectID
	node, failedNode                string
}

// benchFind finds the targets among the tasks (from the tally).
func benchFind(b *testing.B, db *mongo.Database) benchTargets {
	var t benchTargets
	most := map[string]int{}
	for _, by := range []string{"queue", "node"} {
		cur, err := db.Collection("tasks").Aggregate(context.Background(), bson.A{
			bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "k", Value: "$" + by}, {Key: "s", Value: "$status"}}}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		var groups []struct {
			ID struct {
				K any   `bson:"k"`
				S int32 `bson:"s"`
			} `bson:"_id"`
			N int `bson:"n"`
		}
		if err := cur.All(context.Background(), &groups); err != nil {
			b.Fatal(err)
		}
		total := map[any]int{}
		for _, g := range groups {
			total[g.ID.K] += g.N
			for st, what := range map[int32]string{2: "failed", -2: "queued"} {
				if g.ID.S == st && g.N > most[by+what] {
					most[by+what] = g.N
					switch v := g.ID.K.(type) {
					case bson.ObjectID:
						if what == "failed" {
							t.failedQueue = v
						} else {
							t.queuedQueue = v
						}
					case string:
						if what == "failed" {
							t.failedNode = v
						}
					}
				}
			}
		}
		for k, n := range total {
			if n > most[by] {
				most[by] = n
				switch v := k.(type) {
				case bson.ObjectID:
					t.queue = v
				case string:
					t.node = v
				}
			}
		}
	}
	if t.queue.IsZero() || t.failedQueue.IsZero() || t.queuedQueue.IsZero() || t.node == "" || t.failedNode == "" {
		b.Fatalf("targets %+v among the tasks' counts", t)
	}
	return t
}

// executionTime is EXPLAIN ANALYZE's line of the time a statement took.
var executionTime = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)

// benchExplain logs PostgreSQL's plan of the first read of a list's
// candidates: the indexes it reads and the time it takes.
func benchExplain(b *testing.B, srv *Server, op benchOp) {
	if op.cmd[0].Key != "find" {
		return
	}
	raw, err := bson.Marshal(append(op.cmd, bson.E{Key: "$db", Value: "scale"}))
	if err != nil {
		b.Fatal(err)
	}
	fc, err := parseFind(raw)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	table, err := srv.proxy.fast.table(ctx, "scale", "tasks")
	if err != nil {
		b.Fatal(err)
	}
	q, err := planFind(fc, table, fastSpecs["tasks"])
	if err != nil {
		b.Fatal(err)
	}
	sql, args, err := q.statement("", fc.limit)
	if err != nil {
		b.Fatal(err)
	}
	rows, err := srv.proxy.fast.pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	indexes := map[string]bool{}
	for _, m := range regexp.MustCompile(`using (\S+)`).FindAllStringSubmatch(text, -1) {
		indexes[m[1]] = true
	}
	took := ""
	if m := executionTime.FindStringSubmatch(text); m != nil {
		took = m[1] + " ms"
	}
	b.Logf("%s: candidates' SQL %s, indexes %v", op.name, took, indexes)
	if os.Getenv("DEN_DEVDB_BENCH_PLANS") != "" {
		b.Logf("%s\n%s", sql, text)
	}
}
