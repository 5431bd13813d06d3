package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A node document's queue entry is filled as the protocol defines it:
// tasks_todo is count_todo minus the running tasks, tasks_done is
// count_total minus count_todo, none below zero, missing counts are 0;
// the name is cut to NodeQueueNameMax bytes, at a rune boundary, with "…".
func TestNewNodeQueue(t *testing.T) {
	t.Parallel()
	i64 := func(n int64) *int64 { return &n }
	id := bson.NewObjectID()
	for _, c := range []struct {
		name              string
		todo, total       *int64
		doing             int
		wTodo, wDone, wDo int64
	}{
		{"counts", i64(10), i64(15), 3, 7, 5, 3},
		{"more running than to do", i64(2), i64(4), 5, 0, 2, 5},
		{"total below todo", i64(6), i64(4), 0, 6, 0, 0},
		{"no counts", nil, nil, 2, 0, 0, 2},
	} {
		q := queue.Queue{ID: id, Name: "q", Plugin: "P", MaxThreads: 4, CountTodo: c.todo, CountTotal: c.total}
		got := queue.NewNodeQueue(q, c.doing)
		want := queue.NodeQueue{Name: "q", ID: id.Hex(), Constructor: "P", MaxThreads: 4, TasksTodo: c.wTodo, TasksDoing: c.wDo, TasksDone: c.wDone, Preemptive: 1}
		if got != want {
			t.Errorf("%s: %+v, want %+v", c.name, got, want)
		}
	}

	long := strings.Repeat("a", queue.NodeQueueNameMax-2) + "é" + "b" // é straddles the cut
	for _, c := range []struct {
		name, in string
		cut      bool
	}{
		{"short", "queue", false},
		{"at the limit", strings.Repeat("a", queue.NodeQueueNameMax), false},
		{"one byte over", strings.Repeat("a", queue.NodeQueueNameMax+1), true},
		{"a rune at the cut", long, true},
		{"megabytes", strings.Repeat("日本", 1<<20), true},
	} {
		got := queue.NodeQueueName(c.in)
		if !c.cut && got != c.in {
			t.Errorf("%s: NodeQueueName cut %d bytes to %d", c.name, len(c.in), len(got))
		}
		if c.cut && (len(got) > queue.NodeQueueNameMax || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) ||
			!strings.HasPrefix(c.in, strings.TrimSuffix(got, "…")) || len(got) < queue.NodeQueueNameMax-utf8.UTFMax) {
			t.Errorf("%s: NodeQueueName of %d bytes = %d bytes ending %q, valid UTF-8 %v", c.name, len(c.in), len(got), got[max(len(got)-8, 0):], utf8.ValidString(got))
		}
		if e := queue.NewNodeQueue(queue.Queue{Name: c.in}, 0); e.Name != got {
			t.Errorf("%s: the entry's name is not NodeQueueName's", c.name)
		}
	}
}

// A node writes its timestamp alone while a slow pass has not written its
// whole document: a new document holds the node and its timestamp, an
// existing one keeps its queues and the operator's maxthreads. Operators
// then read each node's state (running, dead once silent for longer than
// dead_node_after, stopped once it said so), its _id, its timestamp in
// milliseconds and its name as stored.
func TestNodeTimestampAndState(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	stores := queue.NewStore(db)
	ctx := dentest.Context(t)
	now := time.Now().Truncate(time.Millisecond)
	qid := dentest.Queue(t, db, "q", "P", 2, "fifo")
	entry := queue.NewNodeQueue(queue.Queue{ID: qid, Name: "q", Plugin: "P", MaxThreads: 2}, 0)
	if _, _, err := stores.WriteNodeDocument(ctx, "old", []queue.NodeQueue{entry}, nil, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := stores.SetNodeMaxThreads(ctx, "old", ptr(3)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stores.WriteNodeDocument(ctx, "stopped", nil, &queue.NodeSelf{Stopped: now.Add(-time.Minute)}, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old", "new"} {
		if err := stores.WriteNodeTimestamp(ctx, name, now); err != nil {
			t.Fatalf("timestamp of %s: %v", name, err)
		}
	}
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "_id", Value: "by hand"}, {Key: "node", Value: 7}, {Key: "timestamp", Value: "yesterday"}})

	nodes, err := stores.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]queue.NodeDoc{}
	for _, n := range nodes {
		name := n.Name
		if n.ID().Type == bson.TypeString {
			name = "odd"
		}
		by[name] = n
	}
	if len(nodes) != 4 {
		t.Fatalf("%d node documents, want 4: %v", len(nodes), by)
	}
	old, fresh, stopped, odd := by["old"], by["new"], by["stopped"], by["odd"]
	if !old.Timestamp.Equal(now) || len(old.Queues) != 1 || old.Queues[0] != entry || old.MaxThreads == nil || *old.MaxThreads != 3 {
		t.Errorf("a node document after its timestamp alone: %v", old.Raw)
	}
	if !fresh.Timestamp.Equal(now) || fresh.Queues != nil || fresh.MaxThreads != nil || len(fresh.Raw) == 0 {
		t.Errorf("a new node document of its timestamp alone: %v", fresh.Raw)
	}

	dead := 2 * time.Minute
	for _, c := range []struct {
		what string
		n    queue.NodeDoc
		at   time.Time
		want string
	}{
		{"a node that just wrote", old, now, queue.NodeRunning},
		{"a node silent for dead_node_after", old, now.Add(dead), queue.NodeRunning},
		{"a node silent for longer", old, now.Add(dead + time.Millisecond), queue.NodeDead},
		{"a node that said it stopped", stopped, now, queue.NodeStopped},
		{"a node that said it stopped, long ago", stopped, now.Add(time.Hour), queue.NodeStopped},
		{"a node whose timestamp is no date", odd, now, queue.NodeDead},
	} {
		if got := c.n.State(c.at, dead); got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
	}

	for _, n := range []queue.NodeDoc{old, fresh, stopped} {
		id, ok := n.ID().ObjectIDOK()
		if !ok || id.IsZero() || queue.DocID(n.Raw) != id.Hex() {
			t.Errorf("node %s: ID %v, DocID %q; want its ObjectId", n.Name, n.ID(), queue.DocID(n.Raw))
		}
		if !n.NamedAs(n.Name) || n.NamedAs(n.Name+"x") || n.NamedAs("") {
			t.Errorf("node %s: NamedAs answers wrong", n.Name)
		}
	}
	if ms, ok := old.TimestampMillis(); !ok || ms != now.UnixMilli() {
		t.Errorf("TimestampMillis %d, %v; want %d", ms, ok, now.UnixMilli())
	}
	if s, ok := odd.ID().StringValueOK(); !ok || s != "by hand" || queue.DocID(odd.Raw) != `"by hand"` {
		t.Errorf("a node _id of text: ID %v, DocID %q", odd.ID(), queue.DocID(odd.Raw))
	}
	if _, ok := odd.TimestampMillis(); ok {
		t.Error("TimestampMillis of a timestamp that is no date: ok")
	}
	if odd.NamedAs("7") || odd.NamedAs("") {
		t.Error("a node named 7 as a number is NamedAs the text 7, or no name")
	}
	if got := queue.DocID(mustRaw(t, bson.D{{Key: "node", Value: "x"}})); got != "" {
		t.Errorf("DocID of a document without _id: %q", got)
	}
}

// An operator sets a node's limit (den node set) on an existing node only:
// a name no node has is ErrNoNode, not a new node; nil removes the limit.
// The Disbatch web API's SetNodeLimit picks the node by _id or name, writes
// null for no limit, and says what it matched and changed, no match being
// no error.
func TestOperatorSetsNodeLimits(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	stores := queue.NewStore(db)
	store := stores
	ctx := dentest.Context(t)
	for _, name := range []string{"w1", "w2"} {
		if err := stores.WriteNodeTimestamp(ctx, name, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	maxthreads := func(name string) bson.RawValue {
		t.Helper()
		raw, err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: name}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw.Lookup("maxthreads")
	}

	if err := store.SetNodeMaxThreads(ctx, "w1", ptr(3)); err != nil {
		t.Fatal(err)
	}
	if v, ok := maxthreads("w1").Int32OK(); !ok || v != 3 {
		t.Errorf("maxthreads after set 3: %v", maxthreads("w1"))
	}
	if err := store.SetNodeMaxThreads(ctx, "w1", nil); err != nil {
		t.Fatal(err)
	}
	if v := maxthreads("w1"); v.Type != 0 {
		t.Errorf("maxthreads after removing the limit: %v", v)
	}
	if err := store.SetNodeMaxThreads(ctx, "w9", ptr(1)); !errors.Is(err, queue.ErrNoNode) {
		t.Errorf("set the limit of no node: %v, want ErrNoNode", err)
	}
	if n := dentest.Count(t, db.Collection("nodes"), bson.D{}); n != 2 {
		t.Errorf("%d node documents, want 2", n)
	}

	w2 := must(db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "w2"}}).Raw()).Lookup("_id").ObjectID()
	for _, c := range []struct {
		what  string
		id    bson.ObjectID
		name  string
		limit *int
		want  queue.UpdateResult
		value any // int32, nil for null
	}{
		{"by name", bson.ObjectID{}, "w1", ptr(5), queue.UpdateResult{Matched: 1, Modified: 1}, int32(5)},
		{"by name, again", bson.ObjectID{}, "w1", ptr(5), queue.UpdateResult{Matched: 1, Modified: 0}, int32(5)},
		{"by name, no limit", bson.ObjectID{}, "w1", nil, queue.UpdateResult{Matched: 1, Modified: 1}, nil},
		{"by _id, whatever the name", w2, "w1", ptr(0), queue.UpdateResult{Matched: 1, Modified: 1}, int32(0)},
		{"no such name", bson.ObjectID{}, "w9", ptr(1), queue.UpdateResult{}, nil},
		{"no such _id", bson.NewObjectID(), "w1", ptr(1), queue.UpdateResult{}, nil},
	} {
		got, err := store.SetNodeLimit(ctx, c.id, c.name, c.limit)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.what, got, err, c.want)
		}
		if c.want.Matched == 0 {
			continue
		}
		target := c.name
		if !c.id.IsZero() {
			target = "w2"
		}
		v := maxthreads(target)
		if c.value == nil && v.Type != bson.TypeNull || c.value != nil && (v.Type != bson.TypeInt32 || v.Int32() != c.value.(int32)) {
			t.Errorf("%s: maxthreads of %s is %v, want %v", c.what, target, v, c.value)
		}
	}
	if v := maxthreads("w1"); v.Type != bson.TypeNull {
		t.Errorf("a limit set by _id changed another node: w1's maxthreads %v", v)
	}
	if n := dentest.Count(t, db.Collection("nodes"), bson.D{}); n != 2 {
		t.Errorf("%d node documents, want 2", n)
	}
}
