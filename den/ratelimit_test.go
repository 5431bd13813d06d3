package den_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's rate limit holds across nodes: with rate_limit {starts: 2,
// per: 10} and two nodes serving it, at most 2 of 6 tasks have started 8 s
// after the queue opens, no 3 of the starts the nodes granted fall in any
// 10 s, and all 6 run, each once.
//
// The starts granted are read from the queue's slots while it runs (a
// slot holds each start it grants, at and task, for at least the window):
// a run's own start follows its grant by its runner's start-up, 0.1 s for
// an idle runner and up to 3.4 s for a new one under -race on a loaded
// machine (measured), so the runs' start times alone cannot tell a limit
// that holds from one that does not.
func TestRateLimitHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	// The queue is closed (maxthreads 0) until both nodes serve it.
	qid := dentest.Queue(t, db, "limited", sleepPlugin, 0, "fifo",
		bson.E{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}}})
	dentest.Tasks(t, db, qid, sleepTasks(6, 300)...)
	startNode(t, db, "n1")
	startNode(t, db, "n2")
	dentest.Eventually(t, time.Minute, "both nodes list the queue", func() bool {
		return countNodesServing(t, db, qid) == 2
	})
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: qid}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 10}}}}); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	started := func() int64 {
		raw, err := db.Collection("concurrency").FindOne(ctx, bson.D{{Key: "_id", Value: "sequence"}}).Raw()
		if err != nil {
			return 0
		}
		n, _ := raw.Lookup("now").AsInt64OK()
		return n
	}
	grants := watchGrants(t, db, qid)
	// The wait for all 6 to end covers the first 8 s (6 tasks at 2 per
	// 10 s take 20 s at least), in which at most 2 may start.
	at8 := int64(-1)
	dentest.Eventually(t, time.Minute, "all 6 tasks ended", func() bool {
		if since := time.Since(opened); since < 8*time.Second {
			if n := started(); n > 2 {
				t.Fatalf("%d tasks started %s after the queue opened; rate limit 2 per 10 s", n, since.Round(time.Millisecond))
			}
		} else if at8 < 0 {
			at8 = started()
		}
		grants.read()
		return countDone(t, db)() == 6
	})
	grants.read()
	t.Logf("%d started 8 s after the queue opened; all 6 ended %s after it", at8, time.Since(opened).Round(100*time.Millisecond))

	// Each task ran once, each after a start granted to it; no 3 starts
	// granted within 10 s of each other.
	cur, err := db.Collection("runs").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	ran := map[bson.ObjectID]int{}
	nodes := map[string]int{}
	runStarted := map[bson.ObjectID]time.Time{}
	for cur.Next(ctx) {
		task := cur.Current.Lookup("task_id").ObjectID()
		ran[task]++
		node, _ := cur.Current.Lookup("node").StringValueOK()
		nodes[node]++
		runStarted[task] = cur.Current.Lookup("started").Time()
	}
	if n := slices.Collect(maps.Values(ran)); len(n) != 6 || slices.Max(n) != 1 {
		t.Fatalf("runs of %d tasks, %v each; want 6 tasks, each run once", len(ran), n)
	}
	var starts []time.Time
	granted := map[bson.ObjectID]bool{}
	var lag time.Duration // the longest from a grant to its run's start
	for g := range grants.seen {
		granted[g.task] = true
		starts = append(starts, g.at)
		if r, ok := runStarted[g.task]; ok && r.After(g.at) {
			lag = max(lag, r.Sub(g.at))
		}
	}
	for task := range ran {
		if !granted[task] {
			t.Errorf("task %s ran with no start granted to it seen in the slots", task.Hex())
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 2; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-2]); gap < 10*time.Second {
			t.Errorf("starts %d and %d granted %s apart: 3 starts within 10 s under a limit of 2 per 10 s", i-2, i, gap)
		}
	}
	t.Logf("runs by node: %v; longest from a grant to its run's start: %s", nodes, lag.Round(time.Millisecond))
	if q := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: 1}}}}); q != 0 {
		t.Errorf("%d tasks did not succeed", q)
	}
}

// grantWatch collects the starts a queue's rate limit slots granted, read
// from them while the queue runs: a slot holds each start it grants (at,
// task) for at least the limit's window, so reads a little apart see
// every one. A task put back and granted again counts twice, as the limit
// counts it.
type grantWatch struct {
	t    *testing.T
	db   *mongo.Database
	qid  bson.ObjectID
	seen map[rateGrant]bool
}

// rateGrant is one start a slot granted: to task, at (the node's estimate
// of the server's time).
type rateGrant struct {
	task bson.ObjectID
	at   time.Time
}

func watchGrants(t *testing.T, db *mongo.Database, qid bson.ObjectID) *grantWatch {
	return &grantWatch{t: t, db: db, qid: qid, seen: map[rateGrant]bool{}}
}

// read adds the starts the queue's slots hold now.
func (w *grantWatch) read() {
	w.t.Helper()
	ctx := dentest.Context(w.t)
	cur, err := w.db.Collection(queue.RateLimitsCollection).Find(ctx, bson.D{{Key: "queue", Value: w.qid}})
	if err != nil {
		w.t.Fatalf("read the queue's rate limit slots: %v", err)
	}
	for cur.Next(ctx) {
		task, ok := cur.Current.Lookup("task").ObjectIDOK()
		at, tok := cur.Current.Lookup("at").TimeOK()
		if ok && tok {
			w.seen[rateGrant{task, at}] = true
		}
	}
	if err := cur.Err(); err != nil {
		w.t.Fatalf("read the queue's rate limit slots: %v", err)
	}
}

// countNodesServing is how many node documents list queue qid.
func countNodesServing(t *testing.T, db *mongo.Database, qid bson.ObjectID) int64 {
	t.Helper()
	n, err := db.Collection("nodes").CountDocuments(dentest.Context(t), bson.D{{Key: "queues.id", Value: qid.Hex()}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// What a rate limit costs, counted at the node's client (its runners reach
// the server through it): a queue without one sends nothing to
// rate_limits (but the index the node makes at its start); with one that never refuses, each task costs one
// findAndModify there (and its slots are made once: a find and an insert);
// a refusal costs a findAndModify, a find and the put-back of the task.
func TestRateLimitCost(t *testing.T) {
	t.Parallel()
	const tasks = 20
	for _, c := range []struct {
		name  string
		limit bson.D
	}{
		{"none", nil},
		{"never refuses", bson.D{{Key: "starts", Value: 1000}, {Key: "per", Value: 1}}},
		{"refuses", bson.D{{Key: "starts", Value: 4}, {Key: "per", Value: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The node works through counted; the test's own
			// commands go around it.
			db, counted, commands := countedDB(t)
			var extra []bson.E
			if c.limit != nil {
				extra = append(extra, bson.E{Key: "rate_limit", Value: c.limit})
			}
			qid := dentest.Queue(t, db, "q", sleepPlugin, 4, "fifo", extra...)
			dentest.Tasks(t, db, qid, sleepTasks(tasks, 0)...)
			startNode(t, counted, "n")
			dentest.Eventually(t, 2*time.Minute, "all tasks ended", func() bool { return countDone(t, db)() == tasks })
			got := commands()
			rate := got["findAndModify "+queue.RateLimitsCollection]
			var all int
			for _, n := range got {
				all += n
			}
			t.Logf("%s: %d commands for %d tasks (%.2f per task, idle passes included); on rate_limits: %d findAndModify, %d find, %d insert; on tasks: %d findAndModify, %d update",
				c.name, all, tasks, float64(all)/tasks, rate, got["find "+queue.RateLimitsCollection], got["insert "+queue.RateLimitsCollection],
				got["findAndModify tasks"], got["update tasks"])
			switch {
			case c.limit == nil:
				for k, n := range got {
					// The node's start makes the collection's index
					// (listIndexes, createIndexes), once.
					setup := strings.HasPrefix(k, "listIndexes ") || strings.HasPrefix(k, "createIndexes ")
					if strings.HasSuffix(k, " "+queue.RateLimitsCollection) && !setup {
						t.Errorf("a queue without a rate limit sent %d %s", n, k)
					}
				}
			case c.name == "never refuses":
				// One per task, and one more the first time (before the
				// slots were made).
				if rate != tasks+1 || got["insert "+queue.RateLimitsCollection] != 1 || got["find "+queue.RateLimitsCollection] != 1 {
					t.Errorf("a limit that never refuses: %d findAndModify, %d find, %d insert on rate_limits for %d tasks; want %d, 1, 1",
						rate, got["find "+queue.RateLimitsCollection], got["insert "+queue.RateLimitsCollection], tasks, tasks+1)
				}
			default:
				// Each refusal is one findAndModify more, and one find
				// (after the first, which made the slots); each full pass
				// while a refusal's wait lasts past the next pass reads
				// the slots again (recheckRates), one find.
				refusals := rate - (tasks + 1)
				rechecks := got["find "+queue.RateLimitsCollection] - 1 - refusals
				t.Logf("%d refusals, %d rechecks of a wait", refusals, rechecks)
				if refusals < 1 || rechecks < 0 {
					t.Errorf("a limit that refuses: %d findAndModify and %d find for %d tasks", rate, got["find "+queue.RateLimitsCollection], tasks)
				}
			}
		})
	}
}

// countedDB is a test database, and the same database reached through a
// client that counts the commands sent on it, by name and collection.
func countedDB(t *testing.T) (db, counted *mongo.Database, commands func() map[string]int) {
	t.Helper()
	db = dentest.DB(t)
	var mu sync.Mutex
	seen := map[string]int{}
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.DatabaseName != db.Name() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		seen[e.CommandName+" "+coll]++
	}}
	cl, err := mongo.Connect(options.Client().ApplyURI(dentest.URI()).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Disconnect(context.Background()) })
	return db, cl.Database(db.Name()), func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// A forged rate_limits document does not stop a queue (issue 41): with
// rate_limit {starts: 1, per: 5} and the documents a writer forged before
// the node started (the issue's {queue, slot: -1, at: 9999-01-01}, and
// the queue's own slot 0 dated 9999), a node starts both of its tasks
// within 20 s (the second about 5 s after the first).
func TestForgedRateLimitDocumentsDoNotStopAQueue(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	year9999 := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	qid := dentest.Queue(t, db, "limited", sleepPlugin, 1, "fifo",
		bson.E{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 1}, {Key: "per", Value: 5}}})
	dentest.Insert(t, db.Collection(queue.RateLimitsCollection),
		bson.D{{Key: "queue", Value: qid}, {Key: "slot", Value: -1}, {Key: "at", Value: year9999}},
		bson.D{{Key: "_id", Value: qid.Hex() + "/0"}, {Key: "queue", Value: qid}, {Key: "slot", Value: 0}, {Key: "at", Value: year9999}})
	dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	startNode(t, db, "n")
	dentest.Eventually(t, time.Minute, "the node lists the queue", func() bool { return countNodesServing(t, db, qid) == 1 })
	opened := time.Now()
	if !dentest.UntilBy(opened.Add(20*time.Second), 100*time.Millisecond, func() bool { return countDone(t, db)() >= 2 }) {
		t.Fatalf("%d of 2 tasks ended 20 s after the node listed its queue (rate limit 1 per 5 s): forged rate_limits documents stopped it", countDone(t, db)())
	}
	// That the limit still holds (no more starts than it grants) is
	// TestRateLimitForgedSlots's to show: the runs' own starts follow the
	// starts the limit granted by a runner's start-up time, which under
	// load varies by seconds (3.2 s apart was seen).
	starts := runStarts(t, db)
	if len(starts) != 2 {
		t.Fatalf("%d runs, want 2", len(starts))
	}
	t.Logf("both ended %s after the node listed the queue; runs %s apart", time.Since(opened).Round(100*time.Millisecond), starts[1].Sub(starts[0]).Round(time.Millisecond))
}

// A rate_limits document deleted while a node waits for it stops
// mattering within a pass: the queue's slot, forged to hold a start 50 s
// ahead (inside what a node takes for a start, so it waits for it: 55 s
// with rate_limit {starts: 1, per: 5}), holds its task back over several
// passes; once it is deleted, the task starts within 10 s, not at the
// time the node read at its refusal.
func TestDeletedRateLimitDocumentStopsMatteringWithinAPass(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "limited", sleepPlugin, 1, "fifo",
		bson.E{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 1}, {Key: "per", Value: 5}}})
	slot := bson.D{{Key: "_id", Value: qid.Hex() + "/0"}}
	dentest.Insert(t, db.Collection(queue.RateLimitsCollection),
		append(slot, bson.E{Key: "queue", Value: qid}, bson.E{Key: "slot", Value: 0}, bson.E{Key: "at", Value: time.Now().Add(50 * time.Second)}))
	task := dentest.Tasks(t, db, qid, sleepTasks(1, 0)...)[0]
	startNode(t, db, "n")
	waitPasses(t, db, []string{"n"}, 3, 0)
	if st := dentest.Task(t, db, task).Lookup("status").AsInt64(); st != queue.StatusQueued {
		t.Fatalf("the task has status %d with the queue's slot holding a start 50 s ahead; want it queued", st)
	}
	if _, err := db.Collection(queue.RateLimitsCollection).DeleteOne(ctx, slot); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if !dentest.UntilBy(deleted.Add(10*time.Second), 100*time.Millisecond, func() bool { return countDone(t, db)() >= 1 }) {
		t.Fatalf("the task has not ended 10 s after the slot holding it back was deleted")
	}
	t.Logf("the task ended %s after the slot was deleted", time.Since(deleted).Round(100*time.Millisecond))
}

// runStarts are when the runs of the test's tasks started, in order.
func runStarts(t *testing.T, db *mongo.Database) []time.Time {
	t.Helper()
	cur, err := db.Collection("runs").Find(dentest.Context(t), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for cur.Next(dentest.Context(t)) {
		starts = append(starts, cur.Current.Lookup("started").Time())
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	return starts
}
