package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

func params(n int) []bson.D {
	out := make([]bson.D, n)
	for i := range out {
		out[i] = bson.D{{Key: "i", Value: i}}
	}
	return out
}

func mustQueue(t *testing.T, store *queue.Store, id bson.ObjectID) queue.Queue {
	t.Helper()
	qs, _, err := store.Queues(dentest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.ID == id {
			return q
		}
	}
	t.Fatalf("queue %s not found", id.Hex())
	return queue.Queue{}
}

// Concurrent claimers on different "nodes" never claim a task twice and
// together claim every task.
func TestClaimIsAtomic(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	const tasks, claimers = 60, 6
	dentest.Tasks(t, db, qid, params(tasks)...)
	q := mustQueue(t, store, qid)

	var mu sync.Mutex
	seen := map[bson.ObjectID]string{}
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := string(rune('a' + c))
			for {
				id, ok, err := claimOne(dentest.Context(t), store, q, node)
				if err != nil {
					t.Error(err)
					return
				}
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
	wg.Wait()
	if len(seen) != tasks {
		t.Fatalf("claimed %d distinct tasks, want %d", len(seen), tasks)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: queue.StatusClaimed}}); n != tasks {
		t.Fatalf("%d tasks have status -1, want %d", n, tasks)
	}
}

func TestClaimOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sort    string
		reverse bool
	}{{"fifo", false}, {"lifo", true}} {
		t.Run(tc.sort, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			store := queue.NewStore(db)
			qid := dentest.Queue(t, db, "q", "P", 1, tc.sort)
			ids := dentest.Tasks(t, db, qid, params(5)...)
			q := mustQueue(t, store, qid)
			for i := range ids {
				want := ids[i]
				if tc.reverse {
					want = ids[len(ids)-1-i]
				}
				got, ok, err := claimOne(dentest.Context(t), store, q, "n")
				if err != nil || !ok {
					t.Fatalf("claim %d: ok=%v err=%v", i, ok, err)
				}
				if got != want {
					t.Fatalf("claim %d got %s, want %s", i, got.Hex(), want.Hex())
				}
			}
		})
	}
}

// Only unclaimed queued tasks of the queue are claimed; node null counts as
// unclaimed.
func TestClaimFilter(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	other := dentest.Queue(t, db, "other", "P", 1, "fifo")
	ctx := dentest.Context(t)
	nullNode := bson.NewObjectID()
	_, err := db.Collection("tasks").InsertMany(ctx, []any{
		bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: "someone"}, {Key: "parameters", Value: bson.D{}}},
		bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -4}, {Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}},
		bson.D{{Key: "queue", Value: other}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{}}},
		bson.D{{Key: "_id", Value: nullNode}, {Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: nil}, {Key: "parameters", Value: bson.D{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := mustQueue(t, store, qid)
	id, ok, err := claimOne(ctx, store, q, "n")
	if err != nil || !ok || id != nullNode {
		t.Fatalf("claim = %s, %v, %v; want the task with node null", id.Hex(), ok, err)
	}
	if _, ok, _ := claimOne(ctx, store, q, "n"); ok {
		t.Fatal("claimed a task that was not claimable")
	}
	// Release puts it back, once.
	if ok, err := store.Release(ctx, id, "n", time.Now()); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if ok, _ := store.Release(ctx, id, "n", time.Now()); ok {
		t.Fatal("released a task twice")
	}
	raw := dentest.Task(t, db, id)
	if st, _ := raw.Lookup("status").AsInt64OK(); st != -2 {
		t.Fatalf("released task has status %d", st)
	}
	if n, _ := raw.Lookup("node").AsInt64OK(); n != -1 {
		t.Fatalf("released task has node %v", raw.Lookup("node"))
	}
}

// Stale claims are found among a node's tasks by mtime of either type; rescuing one puts it
// back with its history when it has retries left, else orphans it.
func TestStaleClaimsAreRescued(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	now := time.Now()
	old, fresh := now.Add(-6*time.Minute), now.Add(-time.Minute)
	type task struct {
		node   string
		status int
		mtime  any
		stale  bool
	}
	cases := map[string]task{
		"old date":             {"me", -1, old, true},
		"old epoch int":        {"me", -1, old.Unix(), true},
		"old epoch double":     {"me", -1, float64(old.Unix()), true},
		"fresh date":           {"me", -1, fresh, false},
		"fresh epoch":          {"me", -1, fresh.Unix(), false},
		"old but running":      {"me", 0, old, false},
		"old but another node": {"other", -1, old, false},
	}
	ids := map[string]bson.ObjectID{}
	for name, c := range cases {
		ids[name] = bson.NewObjectID()
		_, err := db.Collection("tasks").InsertOne(ctx, bson.D{
			{Key: "_id", Value: ids[name]}, {Key: "queue", Value: bson.NewObjectID()}, {Key: "node", Value: c.node},
			{Key: "status", Value: c.status}, {Key: "mtime", Value: c.mtime}, {Key: "parameters", Value: bson.D{}},
			{Key: "max_retries", Value: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mine, err := store.Held(ctx, "me", false)
	if err != nil {
		t.Fatal(err)
	}
	stale := queue.StaleClaims(mine, now.Add(-5*time.Minute))
	got := map[bson.ObjectID]queue.Task{}
	for _, task := range stale {
		got[task.ID] = task
	}
	for name, c := range cases {
		if _, ok := got[ids[name]]; ok != c.stale {
			t.Errorf("%s: stale=%v, want %v", name, ok, c.stale)
		}
	}
	if len(stale) != 3 {
		t.Fatalf("%d stale claims, want 3", len(stale))
	}
	// The first rescue retries (max_retries 1), with the reason and outcome
	// in history.
	neverStarted := queue.Outcome{Kind: queue.OutcomeNodeDied, Reason: "never started"}
	first := got[ids["old date"]]
	if st, err := store.Rescue(ctx, first, nil, neverStarted, 0, now); err != nil || st != queue.StatusQueued {
		t.Fatalf("rescue = %d, %v; want a retry (-2)", st, err)
	}
	raw := dentest.Task(t, db, first.ID)
	if st, _ := raw.Lookup("status").AsInt64OK(); st != queue.StatusQueued {
		t.Fatalf("status %d after a rescue with retries left", st)
	}
	if r, o := raw.Lookup("history", "0", "reason").StringValue(), raw.Lookup("history", "0", "outcome").StringValue(); r != "never started" || o != queue.OutcomeNodeDied {
		t.Fatalf("history reason %q, outcome %q", r, o)
	}
	// The same state read twice: the second rescue changes nothing.
	if st, err := store.Rescue(ctx, first, nil, neverStarted, 0, now); err != nil || st != 0 {
		t.Fatalf("second rescue of the same state = %d, %v; want 0", st, err)
	}
	// No retries left: orphaned.
	last := got[ids["old epoch int"]]
	last.Attempts = 1
	if st, err := store.Rescue(ctx, last, nil, neverStarted, 0, now); err != nil || st != queue.StatusOrphaned {
		t.Fatalf("rescue without retries left = %d, %v; want -6", st, err)
	}
	raw = dentest.Task(t, db, last.ID)
	if o, r := raw.Lookup("outcome").StringValue(), raw.Lookup("outcome_reason").StringValue(); o != queue.OutcomeNodeDied || r != "never started" {
		t.Fatalf("orphaned task's outcome %q (%q)", o, r)
	}
}

func TestFillAndDecrementCounts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := bson.NewObjectID()
	_, err := db.Collection("queues").InsertOne(ctx, bson.D{{Key: "_id", Value: qid}, {Key: "name", Value: "q"},
		{Key: "constructor", Value: "P"}, {Key: "count_todo", Value: nil}})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []int{-2, -2, -1, 0, 1, 2, -6} {
		dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: st}})
	}
	q := mustQueue(t, store, qid)
	if q.CountTodo != nil || q.CountTotal != nil {
		t.Fatal("counts should start unset")
	}
	if _, err := store.FillCounts(ctx, []queue.Queue{q}); err != nil {
		t.Fatal(err)
	}
	q = mustQueue(t, store, qid)
	if *q.CountTotal != 7 || *q.CountTodo != 5 {
		t.Fatalf("count_total=%d count_todo=%d, want 7 and 5", *q.CountTotal, *q.CountTodo)
	}
	for range 7 {
		if err := store.DecrementTodo(ctx, qid); err != nil {
			t.Fatal(err)
		}
	}
	if q = mustQueue(t, store, qid); *q.CountTodo != 0 {
		t.Fatalf("count_todo=%d after over-decrementing, want 0", *q.CountTodo)
	}
}

func TestHeartbeatKeepsOperatorMaxthreads(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	limit, problem, err := store.WriteNodeDocument(ctx, "n1", []queue.NodeQueue{}, nil, time.Now())
	if err != nil || limit != nil || problem != "" {
		t.Fatalf("first heartbeat: %v %q %v", limit, problem, err)
	}
	queuesOf := func() bson.RawValue {
		raw, err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "n1"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw.Lookup("queues")
	}
	if q := queuesOf(); q.Type != bson.TypeArray || len(must(q.Array().Values())) != 0 {
		t.Fatalf("a new node document's queues: %s, want []", q)
	}
	for _, tc := range []struct {
		set     any
		want    *int
		problem bool
	}{
		{int32(3), ptr(3), false},
		{0.0, ptr(0), false},
		{nil, nil, false},
		{-1, ptr(0), true},
		{"5", ptr(0), true},
	} {
		dentest.Update(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "n1"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: tc.set}}}})
		limit, problem, err := store.WriteNodeDocument(ctx, "n1", []queue.NodeQueue{{Name: "q"}}, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if (limit == nil) != (tc.want == nil) || (limit != nil && *limit != *tc.want) || (problem != "") != tc.problem {
			t.Errorf("maxthreads %v: limit %v problem %q", tc.set, deref(limit), problem)
		}
		raw, err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "n1"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if got := raw.Lookup("maxthreads"); tc.set != nil && got.Type == 0 {
			t.Errorf("heartbeat removed maxthreads %v", tc.set)
		}
	}
	if n := dentest.Count(t, db.Collection("nodes"), bson.D{}); n != 1 {
		t.Fatalf("%d node documents, want 1", n)
	}
	// Queues nil: the node's queues did not change, and stay as written.
	if _, _, err := store.WriteNodeDocument(ctx, "n1", nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if q := queuesOf(); q.Type != bson.TypeArray || len(must(q.Array().Values())) != 1 {
		t.Fatalf("queues after a heartbeat that left them: %s, want the one written before", q)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ptr(i int) *int { return &i }
func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestEnsureIndexesIsIdempotent(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	for i := range 3 {
		if r, err := store.EnsureIndexes(dentest.Context(t)); err != nil || len(r.Conflicts)+len(r.Failed) > 0 || r.Keys.Any() {
			t.Fatalf("start %d: %+v %v", i, r, err)
		}
	}
	cur, err := db.Collection("tasks").Indexes().List(dentest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for cur.Next(dentest.Context(t)) {
		names = append(names, cur.Current.Lookup("name").StringValue())
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node_1_status_1_queue_1", "node_1_status_1_queue_1__id_1", "node_1_status_1_queue_1__id_-1", "queue_1_status_1"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("index %s missing from %v", want, names)
		}
	}
	// The node index is unique.
	ctx := dentest.Context(t)
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "x"}})
	if _, err := db.Collection("nodes").InsertOne(ctx, bson.D{{Key: "node", Value: "x"}}); err == nil {
		t.Error("two node documents with one name were accepted")
	}
}

// A task that has its outcome already is never rescued, even when a node
// asks (a runner that recorded success and then exited badly).
func TestRescueLeavesEndedTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 1}, {Key: "node", Value: "n"}, {Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: 42}}}}}})
	task, err := store.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := store.Rescue(ctx, *task, nil, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "runner exited 1"}, 0, time.Now()); err != nil || st != 0 {
		t.Fatalf("Rescue of a succeeded task = %d, %v; want 0", st, err)
	}
	if st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK(); st != 1 {
		t.Fatalf("status %d after a refused rescue, want 1", st)
	}
}

// A rescued run's history entry starts when the run started (runner.at),
// not when its runner process did: a runner serves several tasks, and its
// process may be an hour older than the run.
func TestRescueHistoryStartsAtTheRun(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	processStart := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	runStart := time.Now().Add(-2 * time.Minute).Truncate(time.Millisecond)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: 0}, {Key: "node", Value: "n"}, {Key: "max_retries", Value: 1}, {Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()},
			{Key: "pid", Value: 42}, {Key: "started", Value: processStart.UnixMilli()}, {Key: "at", Value: runStart}}}}}})
	task, err := store.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := store.Rescue(ctx, *task, nil, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "runner exited 1"}, 0, time.Now()); err != nil || st != queue.StatusQueued {
		t.Fatalf("Rescue = %d, %v; want the task queued again", st, err)
	}
	history, ok := dentest.Task(t, db, id).Lookup("history").ArrayOK()
	if !ok {
		t.Fatal("no history after a retry")
	}
	vals, _ := history.Values()
	if len(vals) != 1 {
		t.Fatalf("history has %d entries, want 1", len(vals))
	}
	started, ok := vals[0].Document().Lookup("started").TimeOK()
	if !ok || !started.Equal(runStart) {
		t.Fatalf("history entry started %v, want the run's start %v (the process started %v)", started, runStart, processStart)
	}
}

// claimOne claims one task of q for node, as a node's claim of one queue
// does.
func claimOne(ctx context.Context, store *queue.Store, q queue.Queue, node string) (bson.ObjectID, bool, error) {
	c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{q.ID}, Sort: q.Sort, Node: node, At: time.Now()})
	if c.Malformed != nil {
		return c.ID, ok, fmt.Errorf("claimed a malformed document: %s", c.Malformed.Reason)
	}
	return c.ID, ok, err
}

// A claim that takes a document that cannot be a task (an _id that is not
// an ObjectId, a queue that is an array holding the queue's id) says so
// instead of failing: FailClaimed fails it with the reason in its stderr,
// and the next claim takes the good task queued after it. Before, the
// claim's reply did not decode, the node put the document back, and every
// claim of the queue met it again, for ever.
func TestClaimTakesMalformedOutOfTheWay(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	old := time.Now().Add(-time.Hour)
	doc := func(id, q any) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: q}, {Key: "status", Value: int32(-2)}, {Key: "node", Value: int32(-1)},
			{Key: "parameters", Value: bson.D{}}, {Key: "ctime", Value: old}, {Key: "mtime", Value: old}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil}}
	}
	for _, tc := range []struct {
		name string
		doc  bson.D
		want string
	}{
		{"string _id", doc("str-id", qid), "_id"},
		{"int _id", doc(int32(7), qid), "_id"},
		{"binary _id", doc(bson.Binary{Data: []byte{1, 2}}, qid), "_id"},
		{"document _id", doc(bson.D{{Key: "a", Value: 1}}, qid), "_id"},
		{"queue an array holding the id", doc(bson.NewObjectID(), bson.A{qid}), "queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Collection("tasks").InsertOne(ctx, tc.doc); err != nil {
				t.Fatal(err)
			}
			good := dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}})[0]
			c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: "n", At: time.Now()})
			if err != nil || !ok || c.Malformed == nil {
				t.Fatalf("claim: %+v, %v, %v; want the malformed document", c, ok, err)
			}
			if !strings.Contains(c.Malformed.Reason, tc.want) {
				t.Errorf("reason %q does not name %s", c.Malformed.Reason, tc.want)
			}
			if done, err := store.FailClaimed(ctx, *c.Malformed, "n", time.Now()); err != nil || !done {
				t.Fatalf("fail claimed: %v, %v", done, err)
			}
			raw, err := db.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: tc.doc[0].Value}}}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			st, _ := raw.Lookup("status").AsInt64OK()
			stderr, _ := raw.Lookup("stderr").StringValueOK()
			if st != queue.StatusFailed || !strings.HasPrefix(stderr, "den: task not run: ") {
				t.Errorf("malformed document: status %d, stderr %q; want failed with the reason", st, stderr)
			}
			c, ok, err = store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: "n", At: time.Now()})
			if err != nil || !ok || c.Malformed != nil || c.ID != good {
				t.Fatalf("next claim: %+v, %v, %v; want the good task %s", c, ok, err, good.Hex())
			}
		})
	}
}

// A held task whose node is a regular expression (or a document, an
// array) names no node: the rescue of "dead" nodes asks for that node's
// tasks by the value as stored, and gets that task only, never the tasks
// of every node the pattern would match.
func TestNodeTasksMatchesTheNameAsStored(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	live := dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: live}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "alive"}}}})
	for _, holder := range []any{bson.Regex{Pattern: ".*", Options: ""}, bson.A{"alive"}, bson.D{{Key: "$ne", Value: "x"}}} {
		forged := bson.NewObjectID()
		doc := bson.D{{Key: "_id", Value: forged}, {Key: "queue", Value: qid}, {Key: "status", Value: int32(0)}, {Key: "node", Value: holder}, {Key: "parameters", Value: bson.D{}}}
		if _, err := db.Collection("tasks").InsertOne(ctx, doc); err != nil {
			t.Logf("%v: the server refuses it: %v", holder, err)
			continue
		}
		tasks, err := store.NodeTasks(ctx, holder)
		if err != nil {
			t.Fatalf("%v: %v", holder, err)
		}
		for _, task := range tasks {
			if task.ID == live {
				t.Errorf("holder %v: the tasks of node alive came with it", holder)
			}
		}
		if len(tasks) != 1 || tasks[0].ID != forged {
			t.Errorf("holder %v: %d tasks, want the one it holds", holder, len(tasks))
		}
	}
}
