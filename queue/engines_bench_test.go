package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/queue"
)

// BenchmarkEngines measures the development server's engines side by side
// on the same work, the choice of docs/performance.md ("Scale"): a bare
// client of 4 workers (claim, start, finish; nothing of den's node) drains
// DEN_BENCH_QUEUED (10,000) tasks of a fifo queue beside DEN_BENCH_FINISHED
// (20,000) finished ones, on FerretDB's sqlite handler and its postgresql
// handler with and without the GIN twins, with the protocol's sorted claim
// and with claims by candidates. Each configuration stops after
// DEN_BENCH_LIMIT (120 s); it prints tasks/s per DEN_BENCH_SLICE (1,000)
// tasks. The server runs in this process, one write at a time as for
// den dev.
//
//	go test -run '^$' -bench BenchmarkEngines -benchtime 1x -timeout 2h ./queue
func BenchmarkEngines(b *testing.B) {
	finished := benchEnv(b, "DEN_BENCH_FINISHED", 20000)
	queued := benchEnv(b, "DEN_BENCH_QUEUED", 10000)
	slice := benchEnv(b, "DEN_BENCH_SLICE", 1000)
	limit := time.Duration(benchEnv(b, "DEN_BENCH_LIMIT", 120)) * time.Second
	for _, c := range []struct {
		name     string
		cfg      devdb.Config
		protocol bool
	}{
		{"sqlite/protocol", devdb.Config{Engine: devdb.EngineSQLite}, true},
		{"postgresql-no-twins/protocol", devdb.Config{Engine: devdb.EnginePostgreSQL, NoTwins: true}, true},
		{"postgresql/protocol", devdb.Config{Engine: devdb.EnginePostgreSQL}, true},
		{"sqlite/candidates", devdb.Config{Engine: devdb.EngineSQLite}, false},
		{"postgresql-no-twins/candidates", devdb.Config{Engine: devdb.EnginePostgreSQL, NoTwins: true}, false},
		{"postgresql/candidates", devdb.Config{Engine: devdb.EnginePostgreSQL}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.cfg.Engine == devdb.EnginePostgreSQL {
				if _, err := devdb.FindPostgres(""); err != nil {
					b.Skip(err)
				}
			}
			for range b.N {
				engineRun(b, c.cfg, c.protocol, finished, queued, slice, limit)
			}
		})
	}
}

func benchEnv(b *testing.B, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number", name, v)
		}
		return n
	}
	return def
}

func engineRun(b *testing.B, cfg devdb.Config, protocol bool, finished, queued, slice int, limit time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Dir = b.TempDir()
	srv, err := devdb.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); <-srv.Done() }()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("engines")
	store := queue.NewStore(db)
	if protocol {
		queue.ClaimProtocol(store)
	}
	if _, err := store.EnsureIndexes(ctx); err != nil {
		b.Fatal(err)
	}
	qid := bson.NewObjectID()
	if _, err := db.Collection("queues").InsertOne(ctx, bson.D{{Key: "_id", Value: qid}, {Key: "name", Value: "q"}, {Key: "constructor", Value: "P"}, {Key: "sort", Value: "fifo"}}); err != nil {
		b.Fatal(err)
	}
	engineFill(b, ctx, db, qid, finished, queued)
	// The measurement starts with the twins: EnsureIndexes made every
	// collection the work uses (queues, tasks) by createIndexes, and the
	// server's proxy brings a database's twins up to date after each
	// createIndexes, before its reply; the fill makes no collection. (A
	// collection made by its first insert would get its twins only at
	// the upkeep's next sweep.)
	b.ResetTimer()
	began := time.Now()
	var done atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, limit)
	defer stop()
	var wg sync.WaitGroup
	engineWorkers(runCtx, store, qid, &done, &wg)
	last, lastAt := int64(0), began
	var first, final float64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for finishedAll := false; !finishedAll; {
		select {
		case <-runCtx.Done():
			finishedAll = true
		case <-tick.C:
		}
		n := done.Load()
		if n == int64(queued) {
			finishedAll = true
		}
		if n-last >= int64(slice) || (finishedAll && n > last) {
			rate := float64(n-last) / time.Since(lastAt).Seconds()
			if last == 0 {
				first = rate
			}
			final = rate
			fmt.Printf("%s: %6d tasks at %.1fs: %.1f tasks/s\n", b.Name(), n, time.Since(began).Seconds(), rate)
			last, lastAt = n, time.Now()
		}
	}
	stop()
	wg.Wait()
	n := done.Load()
	b.ReportMetric(float64(n)/time.Since(began).Seconds(), "tasks/s")
	b.ReportMetric(float64(n), "tasks")
	if first > 0 {
		b.ReportMetric(final/first, "last/first")
	}
}

// engineFill inserts finished tasks (as earlier runs left them) and then
// queued ones into queue qid, a thousand a command.
func engineFill(b *testing.B, ctx context.Context, db *mongo.Database, qid bson.ObjectID, finished, queued int) {
	docs := make([]any, 0, 1000)
	for i := range finished + queued {
		at := time.Now()
		d := bson.D{{Key: "queue", Value: qid}, {Key: "parameters", Value: bson.D{{Key: "commands", Value: "ab"}}}, {Key: "ctime", Value: at}, {Key: "mtime", Value: at}}
		if i < finished {
			d = append(d, bson.E{Key: "status", Value: 1}, bson.E{Key: "node", Value: "earlier"},
				bson.E{Key: "stdout", Value: "This is command 'a' for apple.\n"}, bson.E{Key: "stderr", Value: "This is command 'b' for banana.\n"},
				bson.E{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "host", Value: "earlier"}, {Key: "pid", Value: i}}},
				bson.E{Key: "usage", Value: bson.D{{Key: "cpu_user_s", Value: 0.001}, {Key: "max_rss_kb", Value: 9000}}})
		} else {
			d = append(d, bson.E{Key: "status", Value: queue.StatusQueued}, bson.E{Key: "node", Value: queue.Unclaimed})
		}
		docs = append(docs, d)
		if len(docs) == cap(docs) || i == finished+queued-1 {
			if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
}

// engineWorkers starts four workers that claim, start and finish tasks of
// qid until ctx ends or nothing is left to claim, counting each in done.
func engineWorkers(ctx context.Context, store *queue.Store, qid bson.ObjectID, done *atomic.Int64, wg *sync.WaitGroup) {
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil {
				c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: node, At: time.Now()})
				if err != nil || !ok {
					return
				}
				token := bson.NewObjectID()
				if _, ok, err := store.Start(ctx, c.ID, node, queue.RunnerInfo{Token: token}, time.Now()); err != nil || !ok {
					return
				}
				if ok, err := store.Finish(ctx, c.ID, node, token, queue.Result{Status: 1, Stdout: "a", Stderr: "b"}, time.Now()); err != nil || !ok {
					return
				}
				done.Add(1)
			}
		}()
	}
}
