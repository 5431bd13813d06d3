package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
)

// BenchmarkNewWork is the check of docs/performance.md's "New work is seen
// at once", run by scripts/newwork.sh: den dev as a user runs it (its own
// data directory, its defaults), with DEN_NEWWORK_QUEUES (2,000) idle
// queues of the Demo plugin beside (half without counts, as a driver
// leaves them), times from the insert to the claim and to the start of a
// task inserted as the README's mongosh example does (no counts raised),
// in a queue a driver inserted a moment before (both schemas), one den
// queue create made a moment before, an idle queue that has been there
// for minutes, and 20 new queues with a task each inserted at once (the
// last). Each case runs DEN_NEWWORK_ROUNDS (3) times. It also prints what
// an idle pass costs the development server: its commands per second by
// command, over DEN_NEWWORK_IDLE (30 s) with nothing to do.
func BenchmarkNewWork(b *testing.B) {
	if testing.Short() {
		b.Skip("the check runs den dev for minutes")
	}
	queues := envInt(b, "DEN_NEWWORK_QUEUES", 2000)
	rounds := envInt(b, "DEN_NEWWORK_ROUNDS", 3)
	idle := time.Duration(envInt(b, "DEN_NEWWORK_IDLE", 30)) * time.Second
	for range b.N {
		newWorkOnce(b, queues, rounds, idle)
	}
}

// newWorkRun is one den dev and a client of its database.
type newWorkRun struct {
	b     *testing.B
	db    *mongo.Database
	uri   string
	demo  bson.ObjectID
	worst time.Duration
}

func newWorkOnce(b *testing.B, queues, rounds int, idle time.Duration) {
	dir := b.TempDir()
	httpAddr := freeAddr(b)
	dev, stdout, stderr := start(b, "dev", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--http-listen", httpAddr)
	uri := devURI(b, stdout)
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(ctx)
	r := &newWorkRun{b: b, db: client.Database("disbatch"), uri: uri}
	var q struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := r.db.Collection("queues").FindOne(ctx, bson.D{{Key: "name", Value: "demo"}}).Decode(&q); err != nil {
		b.Fatalf("the demo queue: %v", err)
	}
	r.demo = q.ID
	began := time.Now()
	r.idleQueues(queues)
	fmt.Printf("%d idle queues inserted in %.1fs\n", queues, time.Since(began).Seconds())
	// A minute and a bit: the node has read every queue again since, so
	// that the idle queues are old ones, and not new. Time must pass: the
	// queues age by the time in their _id against den dev's clock, in
	// another process, which says nothing of its reads of every queue.
	time.Sleep(70 * time.Second)
	before := devdbCommands(b, httpAddr)
	time.Sleep(idle) // a window of idle commands, measured: nothing to wait for
	after := devdbCommands(b, httpAddr)
	fmt.Printf("idle, %d queues: %s\n\n", queues+1, perSecond(after, before, idle))

	b.ResetTimer()
	fmt.Printf("%-52s %10s %10s\n", "case", "claim ms", "start ms")
	for i := range rounds {
		r.measure(fmt.Sprintf("queue a driver inserted (constructor, maxthreads) %d", i), r.driverQueue(i, "constructor", "maxthreads"))
		r.measure(fmt.Sprintf("queue a driver inserted (plugin, threads) %d", i), r.driverQueue(i, "plugin", "threads"))
		r.measure(fmt.Sprintf("queue den queue create made %d", i), r.createdQueue(i))
		r.measure(fmt.Sprintf("idle queue, there for minutes %d", i), r.task(r.demo))
		ids := make([]bson.ObjectID, 20)
		docs := make([]any, 20)
		for j := range docs {
			docs[j] = bson.D{{Key: "name", Value: fmt.Sprintf("burst-%d-%02d", i, j)}, {Key: "constructor", Value: "Disbatch::Plugin::Demo"}, {Key: "maxthreads", Value: 1}}
		}
		res, err := r.db.Collection("queues").InsertMany(ctx, docs)
		if err != nil {
			b.Fatal(err)
		}
		for j, id := range res.InsertedIDs {
			ids[j] = r.task(id.(bson.ObjectID))
		}
		r.measure(fmt.Sprintf("20 new queues at once, the last %d", i), ids...)
		// Another phase of the pass for the next round: a pace, not a wait.
		time.Sleep(time.Duration(300+i*370) * time.Millisecond)
	}
	b.StopTimer()
	fmt.Printf("\nworst start: %s\n", r.worst.Round(time.Millisecond))
	b.ReportMetric(r.worst.Seconds(), "worst-start-s")
	if dev.ProcessState != nil {
		b.Fatalf("den dev exited: %s", stderr)
	}
	stopAndWait(b, dev, syscall.SIGINT)
}

// idleQueues inserts n queues of the Demo plugin with no tasks, half of
// them without counts.
func (r *newWorkRun) idleQueues(n int) {
	docs := make([]any, 0, 1000)
	for i := range n {
		d := bson.D{{Key: "name", Value: fmt.Sprintf("idle-%06d", i)}, {Key: "constructor", Value: "Disbatch::Plugin::Demo"}, {Key: "maxthreads", Value: 1}}
		if i%2 == 0 {
			d = append(d, bson.E{Key: "count_todo", Value: 0}, bson.E{Key: "count_total", Value: 0})
		}
		docs = append(docs, d)
		if len(docs) == cap(docs) || i == n-1 {
			if _, err := r.db.Collection("queues").InsertMany(context.Background(), docs); err != nil {
				r.b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
}

// driverQueue inserts a queue as a driver would, with the plugin and
// limit under the given names, and a task in it at once.
func (r *newWorkRun) driverQueue(i int, plugin, limit string) bson.ObjectID {
	res, err := r.db.Collection("queues").InsertOne(context.Background(), bson.D{
		{Key: "name", Value: fmt.Sprintf("%s-%d", plugin, i)}, {Key: plugin, Value: "Disbatch::Plugin::Demo"}, {Key: limit, Value: 2},
	})
	if err != nil {
		r.b.Fatal(err)
	}
	return r.task(res.InsertedID.(bson.ObjectID))
}

// createdQueue makes a queue with den queue create, and a task in it at
// once.
func (r *newWorkRun) createdQueue(i int) bson.ObjectID {
	name := fmt.Sprintf("created-%d", i)
	denCLI(r.b, r.uri, "queue", "create", name, "--plugin", "Disbatch::Plugin::Demo", "--maxthreads", "2")
	var q struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := r.db.Collection("queues").FindOne(context.Background(), bson.D{{Key: "name", Value: name}}).Decode(&q); err != nil {
		r.b.Fatal(err)
	}
	return r.task(q.ID)
}

// task inserts a Demo task into queue q as the README's mongosh example
// does, without raising the queue's counts.
func (r *newWorkRun) task(q bson.ObjectID) bson.ObjectID {
	id := bson.NewObjectID()
	now := time.Now()
	if _, err := r.db.Collection("tasks").InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: q}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
		{Key: "parameters", Value: bson.D{{Key: "commands", Value: "a"}}},
		{Key: "ctime", Value: now}, {Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
	}); err != nil {
		r.b.Fatal(err)
	}
	return id
}

// measure waits until the tasks ids are claimed, then started (status 0
// or more), timed from the first id's _id (its insert), and prints the
// times of the last of them.
func (r *newWorkRun) measure(what string, ids ...bson.ObjectID) {
	ctx := context.Background()
	inserted := time.Now()
	var claimed, started time.Duration
	filter := func(cond bson.D) bson.D {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "status", Value: cond}}
	}
	if !dentest.UntilBy(time.Now().Add(3*time.Minute), 10*time.Millisecond, func() bool {
		if claimed == 0 {
			n, err := r.db.Collection("tasks").CountDocuments(ctx, filter(bson.D{{Key: "$eq", Value: -2}}))
			if err != nil {
				r.b.Fatal(err)
			}
			if n == 0 {
				claimed = time.Since(inserted)
			}
		}
		n, err := r.db.Collection("tasks").CountDocuments(ctx, filter(bson.D{{Key: "$lt", Value: 0}}))
		if err != nil {
			r.b.Fatal(err)
		}
		if n == 0 {
			started = time.Since(inserted)
			if claimed == 0 {
				claimed = started
			}
		}
		return started != 0
	}) {
		r.b.Fatalf("%s: not started within 3 minutes", what)
	}
	r.worst = max(r.worst, started)
	fmt.Printf("%-52s %10d %10d\n", what, claimed.Milliseconds(), started.Milliseconds())
}

// devdbCommands reads den dev's commands so far, by command and
// collection (den_devdb_commands_total).
func devdbCommands(b *testing.B, addr string) map[string]float64 {
	return devdbMetric(b, addr, "den_devdb_commands_total{")
}

// perSecond says how many commands a second the server answered between
// two reads of devdbCommands, largest first, and in all.
func perSecond(now, before map[string]float64, over time.Duration) string {
	var parts []string
	var sum float64
	keys := slices.Sorted(maps.Keys(now))
	slices.SortStableFunc(keys, func(a, b string) int {
		da, db := now[a]-before[a], now[b]-before[b]
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	for _, k := range keys {
		if d := (now[k] - before[k]) / over.Seconds(); d > 0 {
			parts = append(parts, fmt.Sprintf("%.2f %s", d, k))
			sum += d
		}
	}
	return fmt.Sprintf("%.2f commands/s: %s", sum, strings.Join(parts, ", "))
}
