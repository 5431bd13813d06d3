package den_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// BenchmarkCost measures what one node costs the database, counted at the
// wire by the embedded server's proxy (the benchmark's own commands go
// around it): commands per idle second, commands and new connections per
// completed Demo task (maxthreads 4), tasks per second, insert-to-start
// latency when a slot is free, and the node's RSS and CPU (its average
// since start, runners not included); and, in the same run on the same
// server, the floor: a bare client with 4 workers doing only what a Demo
// task needs (claim, start, report insert, finish, count_todo); and that
// floor again writing, at the finish, the runner and usage fields den
// writes (a server that decodes every document a query scans, as the
// embedded one does, pays for their size on every scan).
//
// scripts/bench.sh runs it and prints a markdown table (DEN_BENCH_TABLE).
// DEN_BENCH_TASKS sets the number of tasks (default 200).
func BenchmarkCost(b *testing.B) {
	for _, queues := range []int{1, 50, 500} {
		b.Run(fmt.Sprintf("queues=%d", queues), func(b *testing.B) {
			for range b.N {
				benchCost(b, queues)
			}
		})
	}
}

type costResult struct {
	queues                   int
	tasks                    int
	idlePerSec, perTask      float64
	connsPerTask             float64
	tasksPerSec, floorPerSec float64
	floorDocsPerSec          float64
	p50, p99                 time.Duration
	rssMiB, cpuPercent       float64
	topIdle, topTask         string
}

// benchTasks is DEN_BENCH_TASKS, else def.
func benchTasks(def int) int {
	tasks := def
	if n, err := fmt.Sscan(os.Getenv("DEN_BENCH_TASKS"), &tasks); n != 1 || err != nil || tasks <= 0 {
		tasks = def
	}
	return tasks
}

// benchDB starts the benchmark's server (benchServer) and returns it with
// its database, reached directly, dropped when the benchmark ends.
func benchDB(ctx context.Context, b *testing.B) (costServer, *mongo.Database) {
	b.Helper()
	srv := benchServer(ctx, b)
	direct, err := mongo.Connect(options.Client().ApplyURI(srv.directURI))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { direct.Disconnect(context.Background()) })
	db := direct.Database(srv.database)
	b.Cleanup(func() { db.Drop(context.Background()) })
	return srv, db
}

func benchCost(b *testing.B, queues int) {
	tasks := benchTasks(200)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel) // after the database is dropped (benchDB)
	srv, db := benchDB(ctx, b)
	var demoQueue bson.ObjectID
	for i := range queues {
		// Every queue is a Demo queue the node serves; all but the last
		// stay empty.
		id := dentest.Queue(b, db, fmt.Sprintf("q%03d", i), demo.Name, 4, "fifo")
		if i == queues-1 {
			demoQueue = id
		}
	}

	node := benchNode(b, srv.uri, srv.database, "bench")
	waitStartUp(b, db, "bench")
	before := srv.stats()
	// Two rescue periods (30s), so that every periodic read is counted at
	// its share. A window of time, measured: nothing to wait for.
	const idleWindow = 60 * time.Second
	time.Sleep(idleWindow)
	idle := srv.stats().Sub(before)
	r := costResult{queues: queues}
	r.idlePerSec = float64(idle.Total()) / idleWindow.Seconds()
	r.topIdle = top(idle)

	before = srv.stats()
	start := time.Now()
	insertTasks(b, db, demoQueue, tasks)
	// At most 10 minutes: a node too slow for that is measured on the
	// tasks it finished (the table says how many).
	// Polled once a second, and the end taken from the last task's own
	// finish (its mtime): each poll is a count that scans the collection
	// on the embedded server, which would slow the node it measures (10
	// polls a second took a sixth of the server's CPU).
	done := int64(0)
	dentest.UntilBy(time.Now().Add(10*time.Minute), time.Second, func() bool {
		done, _ = db.Collection("tasks").CountDocuments(context.Background(), bson.D{{Key: "status", Value: 1}})
		return done >= int64(tasks)
	})
	if done == 0 {
		b.Fatal("no task finished in 10 minutes")
	}
	work := srv.stats().Sub(before)
	took := time.Since(start)
	var last struct {
		Mtime time.Time `bson:"mtime"`
	}
	if err := db.Collection("tasks").FindOne(context.Background(), bson.D{{Key: "status", Value: 1}},
		options.FindOne().SetSort(bson.D{{Key: "mtime", Value: -1}})).Decode(&last); err == nil && last.Mtime.After(start) {
		took = last.Mtime.Sub(start)
	}
	r.tasks = int(done)
	r.perTask = float64(work.Total()) / float64(done)
	r.connsPerTask = float64(work.Connections) / float64(done)
	r.tasksPerSec = float64(done) / took.Seconds()
	r.topTask = top(work)
	r.p50, r.p99 = startLatency(b, db, demoQueue)
	if p, err := process.NewProcess(int32(node.Process.Pid)); err == nil {
		if m, err := p.MemoryInfo(); err == nil {
			r.rssMiB = float64(m.RSS) / (1 << 20)
		}
		created, err1 := p.CreateTime()
		times, err2 := p.Times()
		if err1 == nil && err2 == nil {
			r.cpuPercent = 100 * (times.User + times.System) / time.Since(time.UnixMilli(created)).Seconds()
		}
	}
	node.Process.Kill()
	node.Wait()

	before = srv.stats()
	r.floorPerSec = floor(b, srv.uri, db, tasks, false)
	floorWork := srv.stats().Sub(before)
	before = srv.stats()
	r.floorDocsPerSec = floor(b, srv.uri, db, tasks, true)
	floorDocsWork := srv.stats().Sub(before)

	b.ReportMetric(r.idlePerSec, "idle-cmds/s")
	b.ReportMetric(r.perTask, "cmds/task")
	b.ReportMetric(r.connsPerTask, "conns/task")
	b.ReportMetric(r.tasksPerSec, "tasks/s")
	b.ReportMetric(r.floorPerSec, "floor-tasks/s")
	b.ReportMetric(r.floorDocsPerSec, "floor-den-docs-tasks/s")
	b.ReportMetric(float64(r.p50.Milliseconds()), "p50-start-ms")
	b.ReportMetric(float64(r.p99.Milliseconds()), "p99-start-ms")
	b.ReportMetric(r.rssMiB, "node-RSS-MiB")
	b.ReportMetric(r.cpuPercent, "node-CPU-%")
	b.Logf("idle commands over %s: %s", idleWindow, r.topIdle)
	b.Logf("commands for %d tasks: %s", tasks, r.topTask)
	b.Logf("server time per task, den: %s", busyPerTask(work, r.tasks))
	b.Logf("server time per task, floor: %s", busyPerTask(floorWork, tasks))
	b.Logf("server time per task, floor with den's fields: %s", busyPerTask(floorDocsWork, tasks))
	if file := os.Getenv("DEN_BENCH_TABLE"); file != "" {
		appendRow(b, file, r)
	}
}

// benchNode starts this test binary as a node with production intervals,
// with env added to its environment.
func benchNode(b *testing.B, uri, database, name string, env ...string) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), dentest.EnvRole+"=node", envNodeURI+"="+uri, envNodeDB+"="+database,
		envNodeName+"="+name, envNodeRunLog+"="+filepath.Join(b.TempDir(), "runners.log"), envNodeDefaults+"=1")
	cmd.Env = append(cmd.Env, env...)
	log, err := os.Create(filepath.Join(b.TempDir(), "node.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// costServer is where the cost benchmark runs: the embedded server (its
// serializing proxy counts), or the MongoDB that DEN_TEST_MONGODB_URI names,
// behind a counting proxy that serializes nothing.
type costServer struct {
	uri       string // through the counting proxy: the node's
	directURI string // around it: the benchmark's own
	database  string
	stats     func() devdb.Stats
}

func benchServer(ctx context.Context, b *testing.B) costServer {
	real := os.Getenv(dentest.EnvURI)
	if real == "" {
		dir := b.TempDir()
		sctx, stop := context.WithCancel(ctx)
		// DEN_BENCH_ENGINE picks the embedded server's engine
		// (postgresql, sqlite); by default devdb's choice, as den dev's.
		srv, err := devdb.Start(sctx, devdb.Config{Dir: dir, Engine: os.Getenv("DEN_BENCH_ENGINE")})
		if err != nil {
			stop()
			b.Fatal(err)
		}
		// Stopped, and its PostgreSQL with it, before dir is removed
		// (cleanups run last first).
		b.Cleanup(func() { stop(); <-srv.Done() })
		return costServer{uri: srv.URI(), directURI: srv.DirectURI(), database: "bench", stats: srv.Stats}
	}
	u, err := url.Parse(real)
	if err != nil || u.Scheme != "mongodb" || u.Host == "" || strings.Contains(u.Host, ",") {
		b.Fatalf("%s: give one mongodb:// host (no +srv, no TLS) for the counting proxy: %v", dentest.EnvURI, err)
	}
	counter, err := devdb.Count(ctx, u.Host)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	direct := u.String()
	u.Host = counter.Addr()
	return costServer{uri: u.String(), directURI: direct, database: fmt.Sprintf("den_bench_%d", time.Now().UnixNano()), stats: counter.Stats}
}

// insertTasks inserts n Demo tasks, as a shell user would, with the
// queue's counts.
func insertTasks(b *testing.B, db *mongo.Database, qid bson.ObjectID, n int) {
	docs := make([]any, n)
	now := time.Now()
	for i := range docs {
		docs[i] = bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed},
			{Key: "parameters", Value: bson.D{{Key: "commands", Value: "a"}}}, {Key: "ctime", Value: now}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: nil}, {Key: "stderr", Value: nil}}
	}
	if _, err := db.Collection("tasks").InsertMany(context.Background(), docs); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Collection("queues").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: qid}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: n}, {Key: "count_total", Value: n}}}}); err != nil {
		b.Fatal(err)
	}
}

// latencyTasks is how many tasks startLatency inserts, one at a time.
const latencyTasks = 20

// startLatency inserts tasks one at a time, each once the one before has
// finished (so a slot is free), and returns the p50 and p99 of the time
// from a task's insert (ctime) to the start of its runner.
func startLatency(b *testing.B, db *mongo.Database, qid bson.ObjectID) (p50, p99 time.Duration) {
	var lat []time.Duration
	for range latencyTasks {
		if _, err := db.Collection("tasks").DeleteMany(context.Background(), bson.D{{Key: "status", Value: 1}}); err != nil {
			b.Fatal(err)
		}
		// At a random moment of the node's pass interval, as users
		// insert: right after a task is seen done would be in phase
		// with the pass that started it, and measure a whole interval.
		// (A pace, not a wait: nothing is to happen meanwhile.)
		time.Sleep(rand.N(time.Second))
		insertTasks(b, db, qid, 1)
		var raw bson.Raw
		dentest.Eventually(b, time.Minute, "the task done", func() bool {
			var err error
			raw, err = db.Collection("tasks").FindOne(context.Background(), bson.D{{Key: "status", Value: 1}}).Raw()
			return err == nil
		})
		ctime, ok1 := raw.Lookup("ctime").TimeOK()
		at, ok2 := raw.Lookup("runner", "at").TimeOK()
		if ok1 && ok2 {
			lat = append(lat, at.Sub(ctime))
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
}

// floor is the tasks per second of a bare client with 4 workers doing only
// what a Demo task needs, through the same server; with denDocs its finish
// also writes the runner and usage fields a den runner writes.
func floor(b *testing.B, uri string, bookkeeping *mongo.Database, n int, denDocs bool) float64 {
	name := "floor"
	if denDocs {
		name = "floor_den_docs"
	}
	// A database of its own: its queries scan its n tasks only, as den's
	// scanned den's.
	own := bookkeeping.Client().Database(bookkeeping.Name() + "_" + name)
	defer own.Drop(context.Background())
	qid := dentest.Queue(b, own, name, "Floor", 4, "fifo")
	insertTasks(b, own, qid, n)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database(own.Name())
	tasks, queues, reports := db.Collection("tasks"), db.Collection("queues"), db.Collection(demo.ReportsCollection)
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error // the first write that failed: the rate would be wrong
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = err
		}
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				raw, err := tasks.FindOneAndUpdate(ctx,
					bson.D{{Key: "node", Value: queue.Unclaimed}, {Key: "status", Value: queue.StatusQueued}, {Key: "queue", Value: qid}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: "floor"}, {Key: "status", Value: queue.StatusClaimed}, {Key: "mtime", Value: time.Now()}}}},
					options.FindOneAndUpdate().SetSort(bson.D{{Key: "_id", Value: 1}}).SetReturnDocument(options.After)).Raw()
				if errors.Is(err, mongo.ErrNoDocuments) {
					return // no more tasks
				}
				if err != nil {
					fail(fmt.Errorf("claim: %w", err))
					return
				}
				id := raw.Lookup("_id").ObjectID()
				if _, err := tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "status", Value: queue.StatusClaimed}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusRunning}, {Key: "mtime", Value: time.Now()}}}}); err != nil {
					fail(fmt.Errorf("start: %w", err))
					return
				}
				if _, err := reports.InsertOne(ctx, bson.D{{Key: "task_id", Value: id}, {Key: "status", Value: "SUCCESS"}}); err != nil {
					fail(fmt.Errorf("report: %w", err))
					return
				}
				finish := bson.D{{Key: "status", Value: 1}, {Key: "stdout", Value: "a\n"}, {Key: "stderr", Value: ""}, {Key: "mtime", Value: time.Now()}}
				if denDocs {
					finish = append(finish,
						bson.E{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 12345}, {Key: "started", Value: time.Now().UnixMilli()}, {Key: "host", Value: "vm"}, {Key: "at", Value: time.Now()}}},
						bson.E{Key: "usage", Value: bson.D{{Key: "wall_s", Value: 0.011}, {Key: "cpu_user_s", Value: 0.027}, {Key: "cpu_system_s", Value: 0.02}, {Key: "peak_rss_mb", Value: 34.7}, {Key: "samples", Value: 1}, {Key: "at", Value: time.Now()}}})
				}
				if _, err := tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "status", Value: queue.StatusRunning}},
					bson.D{{Key: "$set", Value: finish}}); err != nil {
					fail(fmt.Errorf("finish: %w", err))
					return
				}
				if _, err := queues.UpdateOne(ctx, bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -1}}}}); err != nil {
					fail(fmt.Errorf("count_todo: %w", err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		b.Fatalf("floor client: %v", failed)
	}
	return float64(n) / time.Since(start).Seconds()
}

// top lists the commands of s, most frequent first.
func top(s devdb.Stats) string {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range s.Commands {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
	}
	return fmt.Sprintf("%d connections; ", s.Connections) + strings.Join(parts, ", ")
}

// busyPerTask lists the server's time per task by command and collection,
// largest first, after their total.
func busyPerTask(s devdb.Stats, tasks int) string {
	type kv struct {
		k string
		v time.Duration
	}
	var all []kv
	var total time.Duration
	for k, v := range s.Busy {
		all = append(all, kv{k, v})
		total += v
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)/float64(max(tasks, 1)))
	}
	parts := []string{"total " + per(total)}
	for _, e := range all {
		parts = append(parts, e.k+" "+per(e.v))
	}
	return strings.Join(parts, ", ")
}

func appendRow(b *testing.B, file string, r costResult) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "| %d | %d | %.1f | %.1f | %.2f | %.1f | %.1f (%.0f %%) | %.1f (%.0f %%) | %d / %d | %.0f | %.1f |\n",
		r.queues, r.tasks, r.idlePerSec, r.perTask, r.connsPerTask, r.tasksPerSec, r.floorPerSec, 100*r.tasksPerSec/r.floorPerSec,
		r.floorDocsPerSec, 100*r.tasksPerSec/r.floorDocsPerSec, r.p50.Milliseconds(), r.p99.Milliseconds(), r.rssMiB, r.cpuPercent)
}
