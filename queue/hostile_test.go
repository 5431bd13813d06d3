package queue_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// storeWrites are the methods of the stores that take no document from the
// database: they write what their caller gives them, each conditional on
// the state it expects, so a hostile document can only fail to match.
// Every other method reads tasks, queues, nodes or config and is tried
// against the corpus below.
var storeWrites = map[string]string{
	"AddStats":           "upserts den's stats documents by _id",
	"TrimStats":          "deletes den's stats documents older than a time, by _id",
	"CreateQueue":        "inserts a queue",
	"CreateQueueWith":    "inserts a queue",
	"UpdateQueue":        "updates a queue by its ObjectId",
	"UpdateQueueResult":  "updates a queue by its ObjectId (UpdateQueue, saying what it matched and changed)",
	"SetNodeLimit":       "updates a node document by _id or name",
	"DeleteQueue":        "deletes a queue by its ObjectId",
	"DeleteReports":      "deletes reports by task_id",
	"TakeLease":          "updates (or inserts) a lease by name",
	"ReleaseLease":       "updates a lease by name and holder",
	"InsertTasks":        "inserts tasks",
	"SetNodeMaxThreads":  "updates a node document by name",
	"WriteNodeTimestamp": "updates this node's timestamp",
	"WriteBeat":          "updates one run's task, by _id, node and token (and counts it by the same when that matched none)",
	"Finish":             "updates one run's task, by _id, node and token",
	"SetUsage":           "updates one run's task, by _id, node and token",
	"PublishLive":        "updates one run's task, by _id, node and token",
	"Retry":              "updates one run's task, by _id, node and token",
	"CancelRunning":      "updates one run's task, by _id, node and token",
	"CancelUnstarted":    "updates a claimed task by _id and node",
	"Release":            "updates a claimed task by _id and node",
	"SetLiveUntil":       "updates a task by _id",
	"DecrementTodo":      "updates a queue by its ObjectId",
	"MarkDependents":     "updates tasks by _id",
	"SetUnfit":           "updates a task by _id and its note",
	"SetCancel":          "updates a task by _id",
	"AddSchedule":        "inserts a schedule",
	"SyncClock":          "asks the server its time (hello): reads no document",
	"PauseSchedule":      "updates a schedule by name (reading it with Schedule, tried below)",
	"DeleteSchedule":     "deletes a schedule by name",
	"RunScheduleNow":     "inserts a schedule's task (reading the schedule with Schedule, tried below)",
	"WatchArrivals":      "a change stream: events with a queue that is not an ObjectId are skipped (Arrivals.Next); the development server has no change streams",
}

// Every query of the stores that reads documents is tried against the corpus of
// hostile documents (dentest.HostileTasks, HostileQueues, HostileNodes):
// none fails, the good documents among them come through, and what
// claims meet is taken out of their way. A new method of a store must be
// added here or to storeWrites, so that none is missed.
//
// The corpus goes in in parts, each in its own database with good tasks
// of its own, and every query is tried on each part: the development
// server scans a whole collection for every query, and the claims and
// the per-task reads meet every document once each, so one database of
// the whole corpus would cost the square of its size.
func TestEveryQueryReadsHostileDocuments(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	qid := bson.NewObjectID()
	all := dentest.HostileTasks(qid, "n", bson.D{{Key: "i", Value: 0}})
	parts := map[string][]dentest.Hostile{}
	const fieldsPerPart = 10
	for _, h := range all {
		part := "task _ids, huge documents and held tasks"
		for i, f := range dentest.TaskFields {
			if strings.HasPrefix(h.What, "task "+f+" ") {
				part = fmt.Sprintf("task fields %d-%d", i/fieldsPerPart*fieldsPerPart, min(len(dentest.TaskFields), (i/fieldsPerPart+1)*fieldsPerPart)-1)
			}
		}
		parts[part] = append(parts[part], h)
	}
	var metMalformed atomic.Int64
	t.Cleanup(func() {
		if metMalformed.Load() == 0 {
			t.Error("no claim met a malformed document: the corpus tests nothing")
		}
	})
	names := slices.Sorted(maps.Keys(parts))
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tryEveryQuery(t, qid, parts[name], nil, nil, &metMalformed)
		})
	}
	t.Run("queues and nodes", func(t *testing.T) {
		t.Parallel()
		tryEveryQuery(t, qid, nil, dentest.HostileQueues("P"), dentest.HostileNodes(), &metMalformed)
	})
	t.Run("schedules", func(t *testing.T) {
		t.Parallel()
		// Their tasks go into a queue of their own, out of the claims' way.
		tryEveryQuery(t, qid, nil, nil, nil, &metMalformed, dentest.HostileSchedules(bson.NewObjectID())...)
	})
}

// tryEveryQuery tries every query of the stores (NodeStore, RunnerStore,
// OperatorStore) on a database of its own that holds a good queue (_id
// qid) with three good tasks, and the hostile tasks, queues and nodes
// given.
func tryEveryQuery(t *testing.T, qid bson.ObjectID, hostileTasks, hostileQueues, hostileNodes []dentest.Hostile, metMalformed *atomic.Int64, hostileSchedules ...dentest.Hostile) {
	h := newHostileDB(t, qid, hostileTasks, hostileQueues, hostileNodes, hostileSchedules)
	h.metMalformed = metMalformed
	calls := slices.Concat(h.queueAndNodeQueries(), h.countAndListQueries(), h.retireScheduleAndTaskQueries(),
		h.rescueAndDependencyQueries(), h.changeAndClaimQueries(), h.uniqueKeyQueries())
	checkEveryMethodTried(t, calls)
	for _, c := range calls {
		t.Run(c.method, func(t *testing.T) {
			// Each query has the time a test has: a query that a
			// hostile document slows down fails on its own.
			h.ctx = dentest.Context(t)
			c.try(t)
		})
	}
	// The checks below have a context of their own: the first was taken
	// before the queries, which a loaded machine has seen take longer
	// than its five minutes.
	ctx := dentest.Context(t)
	// What the queries did to them, every good task is still as it was or
	// was claimed; none was failed for another's sake.
	for _, id := range h.good {
		raw, err := h.db.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := raw.Lookup("status").AsInt64OK(); st != queue.StatusRunning {
			t.Errorf("good task %s: status %d, want running", id.Hex(), st)
		}
	}
}

// hostileDB is the database tryEveryQuery tries the queries on, and what
// the queries share: the context of the query being tried (each has its
// own) and the queues the first read.
type hostileDB struct {
	db           *mongo.Database
	ctx          context.Context
	store        *queue.Store
	qid          bson.ObjectID
	node         string
	good         []bson.ObjectID // the good tasks
	tasks        []dentest.Hostile
	hostileIDs   []bson.ObjectID // the hostile tasks with an ObjectId _id
	now          time.Time
	queues       []queue.Queue
	metMalformed *atomic.Int64
}

// hostileCall is one method tried: its name, and how.
type hostileCall struct {
	method string
	try    func(t *testing.T)
}

func newHostileDB(t *testing.T, qid bson.ObjectID, hostileTasks, hostileQueues, hostileNodes, hostileSchedules []dentest.Hostile) *hostileDB {
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("queues").InsertOne(ctx, bson.D{{Key: "_id", Value: qid}, {Key: "name", Value: "good"}, {Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: int32(1000)}, {Key: "sort", Value: "fifo"}}); err != nil {
		t.Fatal(err)
	}
	h := &hostileDB{db: db, ctx: ctx, store: store, qid: qid, node: "n", now: time.Now(), good: dentest.Tasks(t, db, qid, params(3)...)}
	if len(hostileTasks) > 0 {
		h.tasks = dentest.InsertHostile(t, db.Collection("tasks"), hostileTasks)
	}
	if len(hostileQueues) > 0 {
		dentest.InsertHostile(t, db.Collection("queues"), hostileQueues)
	}
	if len(hostileNodes) > 0 {
		dentest.InsertHostile(t, db.Collection("nodes"), hostileNodes)
	}
	if len(hostileSchedules) > 0 {
		dentest.InsertHostile(t, db.Collection("schedules"), hostileSchedules)
	}
	for _, ht := range h.tasks {
		if id, ok := ht.Doc[0].Value.(bson.ObjectID); ok {
			h.hostileIDs = append(h.hostileIDs, id)
		}
	}
	return h
}

// storeFuncs are tried as the methods are, but are functions of the
// package: ReleaseReady (what SettleDependents does after a success) is
// reached from the tests only.
var storeFuncs = map[string]bool{"ReleaseReady": true}

// checkEveryMethodTried fails t when a method of the Store is neither tried
// nor listed in storeWrites, or a call tries what is no method.
func checkEveryMethodTried(t *testing.T, calls []hostileCall) {
	t.Helper()
	tried := map[string]bool{}
	for _, c := range calls {
		tried[c.method] = true
	}
	types := []reflect.Type{reflect.TypeFor[*queue.Store]()}
	methods := map[string]bool{}
	var missing []string
	for _, typ := range types {
		for i := range typ.NumMethod() {
			name := typ.Method(i).Name
			methods[name] = true
			if !tried[name] && storeWrites[name] == "" && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("methods of the stores neither tried against hostile documents nor listed as writes: %v", missing)
	}
	for _, c := range calls {
		if !methods[c.method] && !storeFuncs[c.method] {
			t.Errorf("%s is not a method of any store", c.method)
		}
	}
}

// queueAndNodeQueries are the reads of queues, node documents and config.
func (h *hostileDB) queueAndNodeQueries() []hostileCall {
	return []hostileCall{
		{"EnsureIndexes", func(t *testing.T) {
			if _, err := h.store.EnsureIndexes(h.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"Queues", func(t *testing.T) {
			var bad []queue.MalformedQueue
			var err error
			h.queues, bad, err = h.store.Queues(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(h.queues, func(q queue.Queue) bool { return q.ID == h.qid }) {
				t.Error("the good queue is missing")
			}
			t.Logf("%d queues usable, %d skipped", len(h.queues), len(bad))
		}},
		{"QueuesWithWork", func(t *testing.T) {
			withWork, err := h.store.QueuesWithWork(h.ctx, queue.WorkRead{IDs: []bson.ObjectID{h.qid}, Since: h.now.Add(-time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(withWork, func(q queue.Queue) bool { return q.ID == h.qid }) {
				t.Error("the good queue, named, is missing")
			}
		}},
		{"QueuesByID", func(t *testing.T) {
			got, err := h.store.QueuesByID(h.ctx, []bson.ObjectID{h.qid, bson.NewObjectID()})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].ID != h.qid {
				t.Errorf("read %d queues by id, want the good one only", len(got))
			}
		}},
		{"CountQueues", func(t *testing.T) { val(h.store.CountQueues(h.ctx))(t) }},
		{"QueueDoc", func(t *testing.T) {
			q, err := h.store.QueueDoc(h.ctx, h.qid)
			if err != nil || q == nil {
				t.Fatalf("%v, %v", q, err)
			}
		}},
		{"FindQueue", func(t *testing.T) {
			if _, _, err := h.store.FindQueue(h.ctx, "good"); err != nil {
				t.Fatal(err)
			}
			// Every tenth queue: each lookup scans them all on the
			// development server.
			for i, q := range h.queues {
				if i%10 != 0 {
					continue
				}
				if _, _, err := h.store.FindQueue(h.ctx, q.ID.Hex()); err != nil {
					t.Errorf("queue %s: %v", q.ID.Hex(), err)
				}
			}
		}},
		{"ActiveConfig", func(t *testing.T) {
			for _, v := range dentest.Values(h.qid) {
				for _, field := range []string{"activequeues", "ignorequeues", "gfs"} {
					if !dentest.Storable(t, v.V) {
						continue // refused by the server: no writer can store it
					}
					doc := bson.D{{Key: "active", Value: true}, {Key: field, Value: v.V}}
					if _, err := h.db.Collection("config").InsertOne(h.ctx, doc); err != nil {
						t.Fatalf("%s %s: %v", field, v.Name, err)
					}
					if _, err := h.store.ActiveConfig(h.ctx); err != nil {
						t.Errorf("%s %s: %v", field, v.Name, err)
					}
					if _, err := h.db.Collection("config").DeleteMany(h.ctx, bson.D{}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{"Nodes", func(t *testing.T) { val(h.store.Nodes(h.ctx))(t) }},
		{"NodesSeenOffers", func(t *testing.T) {
			if _, _, err := h.store.NodesSeenOffers(h.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"Offers", func(t *testing.T) { val(h.store.Offers(h.ctx, h.now.Add(-time.Hour)))(t) }},
	}
}

// countAndListQueries are counts, the Disbatch web API's reads, and the task lists.
func (h *hostileDB) countAndListQueries() []hostileCall {
	return []hostileCall{
		{"TaskCounts", func(t *testing.T) {
			counts := val(h.store.TaskCounts(h.ctx))(t)
			if got := counts[h.qid].ByStatus[queue.StatusQueued]; got < 3 {
				t.Errorf("%d queued tasks counted in the good queue, want at least its 3 good ones", got)
			}
			val(h.store.TaskCounts(h.ctx, h.qid))(t)
		}},
		{"CheckCounts", func(t *testing.T) { val(h.store.CheckCounts(h.ctx))(t) }},
		// What Disbatch's web API reads (den/web/dci): a search, a
		// count and another collection read by a filter its client
		// wrote, here every task of the good queue and every document.
		{"SearchTasks", func(t *testing.T) {
			docs := val(h.store.SearchTasks(h.ctx, bson.D{{Key: "queue", Value: h.qid}}, bson.D{{Key: "_id", Value: 1}}, nil, 0, 0))(t)
			found := map[bson.ObjectID]bool{}
			for _, d := range docs {
				if id, ok := d.Lookup("_id").ObjectIDOK(); ok {
					found[id] = true
				}
			}
			for _, id := range h.good {
				if !found[id] {
					t.Errorf("good task %s not found by a search of its queue (%d found)", id.Hex(), len(docs))
				}
			}
		}},
		{"CountTasksMatching", func(t *testing.T) {
			if n := val(h.store.CountTasksMatching(h.ctx, bson.D{{Key: "queue", Value: h.qid}}))(t); n < int64(len(h.good)) {
				t.Errorf("%d tasks counted in the good queue, want at least its %d good ones", n, len(h.good))
			}
		}},
		{"EachDocument", func(t *testing.T) {
			for _, coll := range []string{"tasks", "queues", "nodes"} {
				n := 0
				if err := h.store.EachDocument(h.ctx, coll, bson.D{}, nil, func(bson.Raw) error { n++; return nil }); err != nil {
					t.Errorf("read %s: %v", coll, err)
				}
				if coll == "tasks" && n < len(h.good) {
					t.Errorf("%d tasks read, want at least the %d good ones", n, len(h.good))
				}
			}
		}},
		{"RetirePage", func(t *testing.T) {
			// What retention reads, each class; nothing is removed.
			for _, class := range queue.RetentionClasses {
				for _, q := range []bson.ObjectID{h.qid, bson.NewObjectID()} {
					f := queue.ClassFilter(q, class, h.now.Add(time.Hour))
					f.Limit = 100
					if _, _, _, err := h.store.RetirePage(h.ctx, f); err != nil {
						t.Errorf("retire page of %s: %v", class, err)
					}
				}
			}
		}},
		{"RetireCount", func(t *testing.T) {
			// The page's bulk purge: counted, bounded by the newest.
			for _, f := range []queue.RetireFilter{{}, {EndedBefore: h.now}, {TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{h.qid}}}} {
				val(h.store.RetireCount(h.ctx, f))(t)
				val(h.store.RetireNewest(h.ctx, f))(t)
			}
		}},
		{"RetireNewest", func(t *testing.T) {}}, // above
		{"QueuesWithPriority", func(t *testing.T) {
			val(h.store.QueuesWithPriority(h.ctx, []bson.ObjectID{h.qid, bson.NewObjectID()}))(t)
		}},
		{"ListTasks", func(t *testing.T) {
			for _, f := range []queue.TaskFilter{{}, {Queues: []bson.ObjectID{h.qid}}, {Statuses: []int{-2, -1, 0}}, {Node: h.node}, {Outcomes: []string{"malformed"}}, {Since: h.now.Add(-time.Hour)},
				{After: bson.NilObjectID, Before: bson.NewObjectID(), Limit: 5000}, {ParamKey: "a", ParamValue: "b"}, {ParamKey: "a.b", ParamValue: "c"}} {
				listed := val(h.store.ListTasks(h.ctx, f))(t)
				if f.Node == "" && len(f.Outcomes) == 0 && f.ParamKey == "" {
					for _, id := range h.good {
						if !slices.ContainsFunc(listed, func(x queue.Task) bool { return x.ID == id }) {
							t.Errorf("filter %+v: good task %s missing", f, id.Hex())
						}
					}
				}
			}
		}},
		{"CountTasks", func(t *testing.T) {
			for _, f := range []queue.TaskFilter{{}, {Queues: []bson.ObjectID{h.qid}}, {ParamKey: "shell", ParamValue: "x"}, {ParamKey: "$where", ParamValue: "1"},
				{Before: bson.NewObjectID(), Statuses: []int{-2}}} {
				val(h.store.CountTasks(h.ctx, f))(t)
			}
		}},
		{"TasksByID", func(t *testing.T) {
			val(h.store.TasksByID(h.ctx, []bson.ObjectID{h.qid, bson.NewObjectID()}))(t)
		}},
		{"ReadCensus", func(t *testing.T) { val(h.store.ReadCensus(h.ctx))(t) }},
		{"MakeCensus", func(t *testing.T) {
			c := val(h.store.MakeCensus(h.ctx, "test", time.Now))(t)
			if c.Total() == 0 {
				t.Error("the census counts no task")
			}
		}},
		{"LastEnded", func(t *testing.T) { val(h.store.LastEnded(h.ctx, h.qid, 1000))(t) }},
		{"RetryCandidates", func(t *testing.T) { val(h.store.RetryCandidates(h.ctx, queue.TaskFilter{}))(t) }},
	}
}

// retireScheduleAndTaskQueries are retention, schedules, single tasks, and what a pass reads of queued and malformed tasks.
func (h *hostileDB) retireScheduleAndTaskQueries() []hostileCall {
	return []hostileCall{
		{"RetireCandidates", func(t *testing.T) {
			// Archived, not deleted: the corpus stays for the calls after.
			for _, f := range []queue.RetireFilter{{}, {EndedBefore: h.now}, {TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{h.qid}, Limit: 100}}} {
				if _, err := h.store.RetireTasks(h.ctx, val(h.store.RetireCandidates(h.ctx, f))(t), queue.RetireArchive); err != nil {
					t.Errorf("archive %+v: %v", f, err)
				}
			}
		}},
		{"RetireTasks", func(t *testing.T) {}}, // above
		{"ArchivedTask", func(t *testing.T) {
			for _, id := range append(slices.Clone(h.good), h.hostileIDs...) {
				if _, err := h.store.ArchivedTask(h.ctx, id); err != nil {
					t.Errorf("archived task %s: %v", id.Hex(), err)
				}
			}
		}},
		{"Schedules", func(t *testing.T) {
			for _, sc := range val(h.store.Schedules(h.ctx))(t) {
				if name, ok := sc.Raw.Lookup("_id").StringValueOK(); ok {
					if _, err := h.store.Schedule(h.ctx, name); err != nil {
						t.Errorf("schedule %q: %v", name, err)
					}
				}
			}
		}},
		{"Schedule", func(t *testing.T) {}}, // above
		{"FireDue", func(t *testing.T) {
			// Twice: the second finds the first's notes and next times.
			for range 2 {
				val(h.store.FireDue(h.ctx, time.Now()))(t)
			}
		}},
		{"UnfitTasks", func(t *testing.T) { val(h.store.UnfitTasks(h.ctx, 1000))(t) }},
		{"Task", func(t *testing.T) {
			for _, id := range append(slices.Clone(h.good), h.hostileIDs...) {
				if _, err := h.store.Task(h.ctx, id); err != nil {
					t.Errorf("task %s: %v", id.Hex(), err)
				}
			}
		}},
		{"Statuses", func(t *testing.T) {
			st := val(h.store.Statuses(h.ctx, append(slices.Clone(h.good), h.hostileIDs...)))(t)
			for _, id := range h.good {
				if st[id] != queue.StatusQueued {
					t.Errorf("good task %s: status %d", id.Hex(), st[id])
				}
			}
		}},
		{"ClaimingNodes", func(t *testing.T) { val(h.store.ClaimingNodes(h.ctx))(t) }},
		{"RunningAll", func(t *testing.T) { val(h.store.RunningAll(h.ctx))(t) }},
		{"RunningInQueue", func(t *testing.T) { val(h.store.RunningInQueue(h.ctx, h.qid))(t) }},
		{"BlockedTasks", func(t *testing.T) { val(h.store.BlockedTasks(h.ctx, []bson.ObjectID{h.qid}, 1000))(t) }},
		{"Probe", func(t *testing.T) {
			got, ok, err := h.store.Probe(h.ctx, queue.ProbeRequest{In: []bson.ObjectID{h.qid}, At: h.now})
			if err != nil || !ok || got != h.qid {
				t.Fatalf("probe: %s, %v, %v; want the good queue", got.Hex(), ok, err)
			}
			// Every queue but the good one: the corpus's tasks name
			// queues of every kind; what comes back is an ObjectId.
			got, ok, err = h.store.Probe(h.ctx, queue.ProbeRequest{NotIn: []bson.ObjectID{h.qid}, At: h.now})
			if err != nil {
				t.Fatal(err)
			}
			if ok && got == h.qid {
				t.Errorf("probe outside the good queue found it")
			}
		}},
		{"Malformed", func(t *testing.T) {
			for _, m := range val(h.store.Malformed(h.ctx, []bson.ObjectID{h.qid}))(t) {
				if _, err := h.store.FailMalformed(h.ctx, m, h.node, h.now); err != nil {
					t.Errorf("fail malformed task %s: %v", m.ID.Hex(), err)
				}
			}
		}},
		{"FailMalformed", func(t *testing.T) {}}, // above
		{"Irregular", func(t *testing.T) {
			for _, task := range val(h.store.Irregular(h.ctx, []bson.ObjectID{h.qid}, nil))(t) {
				if len(task.Malformed()) > 0 {
					if _, err := h.store.FailQueued(h.ctx, task, h.node, "unreadable", h.now); err != nil {
						t.Errorf("fail task %s: %v", task.ID.Hex(), err)
					}
					continue
				}
				if _, err := h.store.Normalize(h.ctx, task); err != nil {
					t.Errorf("normalize task %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"Normalize", func(t *testing.T) {}}, // above
	}
}

// rescueAndDependencyQueries are rescues, dependencies, retries, the node document and why a task waits.
func (h *hostileDB) rescueAndDependencyQueries() []hostileCall {
	return []hostileCall{
		{"FailQueued", func(t *testing.T) {}}, // above
		{"FillCounts", func(t *testing.T) {
			if _, err := h.store.FillCounts(h.ctx, h.queues); err != nil {
				t.Fatal(err)
			}
		}},
		{"CancelQueued", func(t *testing.T) { val(h.store.CancelQueued(h.ctx, h.now))(t) }},
		{"Held", func(t *testing.T) {
			mine := val(h.store.Held(h.ctx, h.node, false))(t)
			val(h.store.Held(h.ctx, h.node, true))(t)
			for _, task := range mine {
				if _, err := h.store.Rescue(h.ctx, task, nil, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "test"}, 0, h.now); err != nil {
					t.Errorf("rescue task %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"Rescue", func(t *testing.T) {}}, // above
		{"NodeTasks", func(t *testing.T) { val(h.store.NodeTasks(h.ctx, h.node))(t) }},
		{"ReleaseClaims", func(t *testing.T) { val(h.store.ReleaseClaims(h.ctx, "nobody-claims", h.now))(t) }},
		{"ReleaseReady", func(t *testing.T) { val(queue.ReleaseReady(h.ctx, h.store, h.now))(t) }},
		{"MarkWaiting", func(t *testing.T) {
			for _, b := range val(h.store.BlockedTasks(h.ctx, []bson.ObjectID{h.qid}, 1000))(t) {
				if b.Problem != "" {
					if _, err := h.store.FailBlocked(h.ctx, b, b.Problem, h.now); err != nil {
						t.Errorf("fail blocked %s: %v", b.ID.Hex(), err)
					}
					continue
				}
				if _, err := h.store.MarkWaiting(h.ctx, b, b.After); err != nil {
					t.Errorf("register %s: %v", b.ID.Hex(), err)
				}
			}
		}},
		{"FailBlocked", func(t *testing.T) {}}, // above
		{"CancelDependents", func(t *testing.T) { val(h.store.CancelDependents(h.ctx, h.hostileIDs, "test", h.now))(t) }},
		{"SettleDependents", func(t *testing.T) {
			var ended []queue.EndedTask
			for i, id := range h.hostileIDs {
				ended = append(ended, queue.EndedTask{ID: id, Status: []int{queue.StatusSucceeded, queue.StatusFailed, queue.StatusCancelled}[i%3]})
			}
			if _, _, err := h.store.SettleDependents(h.ctx, ended, h.now); err != nil {
				t.Fatal(err)
			}
		}},
		{"RetryEnded", func(t *testing.T) {
			for _, task := range val(h.store.RetryCandidates(h.ctx, queue.TaskFilter{Queues: []bson.ObjectID{h.qid}, Limit: 50}))(t) {
				if _, err := h.store.RetryEnded(h.ctx, task, h.now); err != nil {
					t.Errorf("retry %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"WriteNodeDocument", func(t *testing.T) {
			if _, _, err := h.store.WriteNodeDocument(h.ctx, h.node, []queue.NodeQueue{}, nil, h.now); err != nil {
				t.Fatal(err)
			}
		}},
		{"ReadFacts", func(t *testing.T) {
			facts := val(h.store.ReadFacts(h.ctx, h.now, time.Minute))(t)
			for _, id := range append(slices.Clone(h.good), h.hostileIDs...) {
				task, err := h.store.Task(h.ctx, id)
				if err != nil || task == nil {
					continue
				}
				if r, err := h.store.Why(h.ctx, facts, *task); err != nil || len(r) == 0 {
					t.Errorf("why %s: %v, %v", id.Hex(), r, err)
				}
			}
		}},
		{"Why", func(t *testing.T) {}}, // above
		{"OldestReady", func(t *testing.T) {
			if _, _, err := h.store.OldestReady(h.ctx, h.qid, h.now); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// changeAndClaimQueries are operators' changes, then the claims (last: they take every claimable document), then stats.
func (h *hostileDB) changeAndClaimQueries() []hostileCall {
	return []hostileCall{
		{"PauseQueue", func(t *testing.T) {
			qs, _, err := h.store.Queues(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				if _, err := h.store.PauseQueue(h.ctx, q.ID, "test", h.now); err != nil {
					t.Errorf("pause %s: %v", q.ID.Hex(), err)
				}
				if _, err := h.store.ResumeQueue(h.ctx, q.ID); err != nil {
					t.Errorf("resume %s: %v", q.ID.Hex(), err)
				}
			}
		}},
		{"ResumeQueue", func(t *testing.T) {}}, // above
		{"QuietNode", func(t *testing.T) {
			// Each node document, whatever it holds, is read and quieted
			// and resumed, or refused with an answer: one whose node is
			// not a string has no name to be reached by (ErrNoNode).
			for _, n := range val(h.store.Nodes(h.ctx))(t) {
				if _, err := h.store.QuietNode(h.ctx, n.Name, "test", h.now); err != nil && !errors.Is(err, queue.ErrNoNode) {
					t.Errorf("quiet node %q: %v", n.Name, err)
				}
				if _, err := h.store.ResumeNode(h.ctx, n.Name); err != nil && !errors.Is(err, queue.ErrNoNode) {
					t.Errorf("resume node %q: %v", n.Name, err)
				}
			}
		}},
		{"ResumeNode", func(t *testing.T) {}}, // above
		{"ForgetNode", func(t *testing.T) {
			// Refusals are answers: what is tried is that no document
			// breaks the reads.
			for _, n := range val(h.store.Nodes(h.ctx))(t) {
				_, _ = h.store.ForgetNode(h.ctx, n.Name, h.now, time.Minute)
			}
		}},
		{"FixCounts", func(t *testing.T) {
			for _, d := range val(h.store.CheckCounts(h.ctx))(t) {
				if d.Drifted() {
					if _, err := h.store.FixCounts(h.ctx, d); err != nil {
						t.Errorf("fix counts of %s: %v", d.Queue.ID.Hex(), err)
					}
				}
			}
		}},
		// The claims last: they take every claimable document, good or
		// not, and each either is a task to run or says why it is not.
		{"Claim", func(t *testing.T) {
			claimed := map[bson.ObjectID]bool{}
			malformed := 0
			for i := 0; ; i++ {
				if i > 2*len(h.tasks)+10 {
					t.Fatal("claims go on for ever: something is claimed again and again")
				}
				c, ok, err := h.store.Claim(h.ctx, queue.ClaimRequest{Queues: []bson.ObjectID{h.qid}, Sort: queue.SortFIFO, Node: h.node, At: time.Now()})
				if err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
				if !ok {
					break
				}
				if c.Malformed != nil {
					malformed++
					if _, err := h.store.FailClaimed(h.ctx, *c.Malformed, h.node, time.Now()); err != nil {
						t.Errorf("fail claimed %s: %v", c.Malformed.ID, err)
					}
					continue
				}
				claimed[c.ID] = true
				// What a runner reads when it starts the task.
				runner := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Started: 1, Host: "h"}
				if _, ok, err := h.store.Start(h.ctx, c.ID, h.node, runner, time.Now()); err != nil || !ok {
					t.Errorf("start %s: %v, %v", c.ID.Hex(), ok, err)
				}
			}
			for _, id := range h.good {
				if !claimed[id] {
					t.Errorf("good task %s was not claimed", id.Hex())
				}
			}
			h.metMalformed.Add(int64(malformed))
			left, err := h.db.Collection("tasks").CountDocuments(h.ctx, queue.ClaimFilter(time.Now(), nil, h.qid))
			if err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d documents still match the claim after it found nothing", left)
			}
			t.Logf("%d tasks claimed, %d malformed documents failed", len(claimed), malformed)
		}},
		{"FailClaimed", func(t *testing.T) {}}, // above
		{"Start", func(t *testing.T) {}},       // above
		{"ReleaseLost", func(t *testing.T) { val(h.store.ReleaseLost(h.ctx, []bson.ObjectID{h.qid}, h.node, h.now))(t) }},
		{"Stats", func(t *testing.T) {
			val(h.store.Stats(h.ctx, queue.StatsQuery{Step: time.Minute, Since: h.now.Add(-time.Hour), Queue: h.qid}))(t)
		}},
	}
}

// val returns a function that fails t on err and returns v:
// val(store.Query(ctx))(t).
func val[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// uniqueKeyQueries are the queries of unique tasks (queue.NodeStore: EnsureUniqueKeys, TakeOutOversized, FreeEnded, KeyHolder).
func (h *hostileDB) uniqueKeyQueries() []hostileCall {
	keys := queue.NewStore(h.db)
	return []hostileCall{
		{"EnsureUniqueKeys", func(t *testing.T) {
			if err := keys.EnsureUniqueKeys(h.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"TakeOutOversized", func(t *testing.T) {
			before := map[bson.ObjectID]string{}
			for _, id := range h.good {
				before[id] = dentest.Task(t, h.db, id).String()
			}
			if _, err := keys.TakeOutOversized(h.ctx); err != nil {
				t.Fatal(err)
			}
			for _, id := range h.good { // they have no key
				if after := dentest.Task(t, h.db, id).String(); after != before[id] {
					t.Errorf("good task %s changed by TakeOutOversized: %s, was %s", id.Hex(), after, before[id])
				}
			}
		}},
		{"FreeEnded", func(t *testing.T) {
			for _, key := range []string{"", "k"} {
				if _, err := keys.FreeEnded(h.ctx, h.qid, key, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"KeyHolder", func(t *testing.T) {
			if held, err := keys.KeyHolder(h.ctx, h.qid, "k"); err != nil || !held.Holder.IsZero() {
				t.Fatalf("KeyHolder = %v, %v; want no holder", held, err)
			}
		}},
	}
}
