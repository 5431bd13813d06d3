package queue_test

import (
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

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// storeWrites are the methods of Store that take no document from the
// database: they write what their caller gives them, each conditional on
// the state it expects, so a hostile document can only fail to match.
// Every other method reads tasks, queues, nodes or config and is tried
// against the corpus below.
var storeWrites = map[string]string{
	"AddStats":          "upserts den's stats documents by _id",
	"TrimStats":         "deletes den's stats documents older than a time, by _id",
	"CreateQueue":       "inserts a queue",
	"CreateQueueWith":   "inserts a queue",
	"UpdateQueue":       "updates a queue by its ObjectId",
	"UpdateQueueResult": "updates a queue by its ObjectId (UpdateQueue, saying what it matched and changed)",
	"SetNodeLimit":      "updates a node document by _id or name",
	"DeleteQueue":       "deletes a queue by its ObjectId",
	"DeleteReports":     "deletes reports by task_id",
	"TakeLease":         "updates (or inserts) a lease by name",
	"ReleaseLease":      "updates a lease by name and holder",
	"InsertTasks":       "inserts tasks",
	"SetNodeMaxThreads": "updates a node document by name",
	"Alive":             "updates this node's timestamp",
	"Renew":             "updates one run's task, by _id, node and token (and counts it by the same when that matched none)",
	"Finish":            "updates one run's task, by _id, node and token",
	"SetUsage":          "updates one run's task, by _id, node and token",
	"PublishLive":       "updates one run's task, by _id, node and token",
	"Retry":             "updates one run's task, by _id, node and token",
	"CancelRunning":     "updates one run's task, by _id, node and token",
	"CancelUnstarted":   "updates a claimed task by _id and node",
	"Release":           "updates a claimed task by _id and node",
	"WantLive":          "updates a task by _id",
	"DecrementTodo":     "updates a queue by its ObjectId",
	"MarkDependents":    "updates tasks by _id",
	"Succeeded":         "pulls ids from waiting lists (tried by ReleaseReady below)",
	"SetUnfit":          "updates a task by _id and its note",
	"Cancel":            "updates a task by _id",
	"AddSchedule":       "inserts a schedule",
	"SyncClock":         "asks the server its time (hello): reads no document",
	"PauseSchedule":     "updates a schedule by name (reading it with Schedule, tried below)",
	"DeleteSchedule":    "deletes a schedule by name",
	"WatchArrivals":     "a change stream: events with a queue that is not an ObjectId are skipped (Arrivals.Next); the development server has no change streams",
}

// Every query of Store that reads documents is tried against the corpus of
// hostile documents (dentest.HostileTasks, HostileQueues, HostileNodes):
// none fails, the good documents among them come through, and what
// claims meet is taken out of their way. A new method of Store must be
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

// tryEveryQuery tries every query of Store on a database of its own that
// holds a good queue (_id qid) with three good tasks, and the hostile
// tasks, queues and nodes given.
func tryEveryQuery(t *testing.T, qid bson.ObjectID, hostileTasks, hostileQueues, hostileNodes []dentest.Hostile, metMalformed *atomic.Int64, hostileSchedules ...dentest.Hostile) {
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	const node = "n"
	if _, err := db.Collection("queues").InsertOne(ctx, bson.D{{Key: "_id", Value: qid}, {Key: "name", Value: "good"}, {Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: int32(1000)}, {Key: "sort", Value: "fifo"}}); err != nil {
		t.Fatal(err)
	}
	good := dentest.Tasks(t, db, qid, params(3)...)
	var tasks []dentest.Hostile
	if len(hostileTasks) > 0 {
		tasks = dentest.InsertHostile(t, db.Collection("tasks"), hostileTasks)
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
	var hostileIDs []bson.ObjectID
	for _, h := range tasks {
		if id, ok := h.Doc[0].Value.(bson.ObjectID); ok {
			hostileIDs = append(hostileIDs, id)
		}
	}
	now := time.Now()
	var queues []queue.Queue

	calls := []struct {
		method string
		try    func(t *testing.T)
	}{
		{"EnsureIndexes", func(t *testing.T) {
			if _, err := store.EnsureIndexes(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"Queues", func(t *testing.T) {
			var bad []queue.MalformedQueue
			var err error
			queues, bad, err = store.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(queues, func(q queue.Queue) bool { return q.ID == qid }) {
				t.Error("the good queue is missing")
			}
			t.Logf("%d queues usable, %d skipped", len(queues), len(bad))
		}},
		{"QueuesWithWork", func(t *testing.T) {
			withWork, err := store.QueuesWithWork(ctx, []bson.ObjectID{qid})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(withWork, func(q queue.Queue) bool { return q.ID == qid }) {
				t.Error("the good queue, named, is missing")
			}
		}},
		{"CountQueues", func(t *testing.T) { val(store.CountQueues(ctx))(t) }},
		{"QueueDoc", func(t *testing.T) {
			q, err := store.QueueDoc(ctx, qid)
			if err != nil || q == nil {
				t.Fatalf("%v, %v", q, err)
			}
		}},
		{"FindQueue", func(t *testing.T) {
			if _, _, err := store.FindQueue(ctx, "good"); err != nil {
				t.Fatal(err)
			}
			// Every tenth queue: each lookup scans them all on the
			// development server.
			for i, q := range queues {
				if i%10 != 0 {
					continue
				}
				if _, _, err := store.FindQueue(ctx, q.ID.Hex()); err != nil {
					t.Errorf("queue %s: %v", q.ID.Hex(), err)
				}
			}
		}},
		{"ActiveConfig", func(t *testing.T) {
			for _, v := range dentest.Values(qid) {
				for _, field := range []string{"activequeues", "ignorequeues", "gfs"} {
					if !dentest.Storable(t, v.V) {
						continue // refused by the server: no writer can store it
					}
					doc := bson.D{{Key: "active", Value: true}, {Key: field, Value: v.V}}
					if _, err := db.Collection("config").InsertOne(ctx, doc); err != nil {
						t.Fatalf("%s %s: %v", field, v.Name, err)
					}
					if _, err := store.ActiveConfig(ctx); err != nil {
						t.Errorf("%s %s: %v", field, v.Name, err)
					}
					if _, err := db.Collection("config").DeleteMany(ctx, bson.D{}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{"Nodes", func(t *testing.T) { val(store.Nodes(ctx))(t) }},
		{"NodesSeenOffers", func(t *testing.T) {
			if _, _, err := store.NodesSeenOffers(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"Offers", func(t *testing.T) { val(store.Offers(ctx, now.Add(-time.Hour)))(t) }},
		{"TaskCounts", func(t *testing.T) {
			counts := val(store.TaskCounts(ctx))(t)
			if got := counts[qid].ByStatus[queue.StatusQueued]; got < 3 {
				t.Errorf("%d queued tasks counted in the good queue, want at least its 3 good ones", got)
			}
			val(store.TaskCounts(ctx, qid))(t)
		}},
		{"CheckCounts", func(t *testing.T) { val(store.CheckCounts(ctx))(t) }},
		// What Disbatch's web API reads (den/web/dci): a search, a
		// count and another collection read by a filter its client
		// wrote, here every task of the good queue and every document.
		{"SearchTasks", func(t *testing.T) {
			docs := val(store.SearchTasks(ctx, bson.D{{Key: "queue", Value: qid}}, bson.D{{Key: "_id", Value: 1}}, nil, 0, 0))(t)
			found := map[bson.ObjectID]bool{}
			for _, d := range docs {
				if id, ok := d.Lookup("_id").ObjectIDOK(); ok {
					found[id] = true
				}
			}
			for _, id := range good {
				if !found[id] {
					t.Errorf("good task %s not found by a search of its queue (%d found)", id.Hex(), len(docs))
				}
			}
		}},
		{"CountTasksMatching", func(t *testing.T) {
			if n := val(store.CountTasksMatching(ctx, bson.D{{Key: "queue", Value: qid}}))(t); n < int64(len(good)) {
				t.Errorf("%d tasks counted in the good queue, want at least its %d good ones", n, len(good))
			}
		}},
		{"EachDocument", func(t *testing.T) {
			for _, coll := range []string{"tasks", "queues", "nodes"} {
				n := 0
				if err := store.EachDocument(ctx, coll, bson.D{}, nil, func(bson.Raw) error { n++; return nil }); err != nil {
					t.Errorf("read %s: %v", coll, err)
				}
				if coll == "tasks" && n < len(good) {
					t.Errorf("%d tasks read, want at least the %d good ones", n, len(good))
				}
			}
		}},
		{"RetirePage", func(t *testing.T) {
			// What retention reads, each class; nothing is removed.
			for _, class := range queue.RetentionClasses {
				for _, q := range []bson.ObjectID{qid, bson.NewObjectID()} {
					f := queue.ClassFilter(q, class, now.Add(time.Hour))
					f.Limit = 100
					if _, _, _, err := store.RetirePage(ctx, f); err != nil {
						t.Errorf("retire page of %s: %v", class, err)
					}
				}
			}
		}},
		{"EndedSince", func(t *testing.T) { val(store.EndedSince(ctx, time.Time{}))(t) }},
		{"ListTasks", func(t *testing.T) {
			for _, f := range []queue.TaskFilter{{}, {Queues: []bson.ObjectID{qid}}, {Statuses: []int{-2, -1, 0}}, {Node: node}, {Outcomes: []string{"malformed"}}, {Since: now.Add(-time.Hour)},
				{After: bson.NilObjectID, Before: bson.NewObjectID(), Limit: 5000}, {ParamKey: "a", ParamValue: "b"}, {ParamKey: "a.b", ParamValue: "c"}} {
				listed := val(store.ListTasks(ctx, f))(t)
				if f.Node == "" && len(f.Outcomes) == 0 && f.ParamKey == "" {
					for _, id := range good {
						if !slices.ContainsFunc(listed, func(x queue.Task) bool { return x.ID == id }) {
							t.Errorf("filter %+v: good task %s missing", f, id.Hex())
						}
					}
				}
			}
		}},
		{"CountTasks", func(t *testing.T) {
			for _, f := range []queue.TaskFilter{{}, {Queues: []bson.ObjectID{qid}}, {ParamKey: "shell", ParamValue: "x"}, {ParamKey: "$where", ParamValue: "1"},
				{Before: bson.NewObjectID(), Statuses: []int{-2}}} {
				val(store.CountTasks(ctx, f))(t)
			}
		}},
		{"RecentFailures", func(t *testing.T) { val(store.RecentFailures(ctx, 1000))(t) }},
		{"LastEnded", func(t *testing.T) { val(store.LastEnded(ctx, qid, 1000))(t) }},
		{"RetryCandidates", func(t *testing.T) { val(store.RetryCandidates(ctx, queue.TaskFilter{}))(t) }},
		{"RetireCandidates", func(t *testing.T) {
			// Archived, not deleted: the corpus stays for the calls after.
			for _, f := range []queue.RetireFilter{{}, {EndedBefore: now}, {TaskFilter: queue.TaskFilter{Queues: []bson.ObjectID{qid}, Limit: 100}}} {
				if _, err := store.RetireTasks(ctx, val(store.RetireCandidates(ctx, f))(t), queue.RetireArchive); err != nil {
					t.Errorf("archive %+v: %v", f, err)
				}
			}
		}},
		{"RetireTasks", func(t *testing.T) {}}, // above
		{"ArchivedTask", func(t *testing.T) {
			for _, id := range append(slices.Clone(good), hostileIDs...) {
				if _, err := store.ArchivedTask(ctx, id); err != nil {
					t.Errorf("archived task %s: %v", id.Hex(), err)
				}
			}
		}},
		{"Schedules", func(t *testing.T) {
			for _, sc := range val(store.Schedules(ctx))(t) {
				if name, ok := sc.Raw.Lookup("_id").StringValueOK(); ok {
					if _, err := store.Schedule(ctx, name); err != nil {
						t.Errorf("schedule %q: %v", name, err)
					}
				}
			}
		}},
		{"Schedule", func(t *testing.T) {}}, // above
		{"FireDue", func(t *testing.T) {
			// Twice: the second finds the first's notes and next times.
			for range 2 {
				val(store.FireDue(ctx, time.Now()))(t)
			}
		}},
		{"UnfitTasks", func(t *testing.T) { val(store.UnfitTasks(ctx, 1000))(t) }},
		{"Task", func(t *testing.T) {
			for _, id := range append(slices.Clone(good), hostileIDs...) {
				if _, err := store.Task(ctx, id); err != nil {
					t.Errorf("task %s: %v", id.Hex(), err)
				}
			}
		}},
		{"Statuses", func(t *testing.T) {
			st := val(store.Statuses(ctx, append(slices.Clone(good), hostileIDs...)))(t)
			for _, id := range good {
				if st[id] != queue.StatusQueued {
					t.Errorf("good task %s: status %d", id.Hex(), st[id])
				}
			}
		}},
		{"ClaimingNodes", func(t *testing.T) { val(store.ClaimingNodes(ctx))(t) }},
		{"Running", func(t *testing.T) { val(store.Running(ctx, []bson.ObjectID{qid}))(t) }},
		{"RunningInQueue", func(t *testing.T) { val(store.RunningInQueue(ctx, qid))(t) }},
		{"BlockedTasks", func(t *testing.T) { val(store.BlockedTasks(ctx, []bson.ObjectID{qid}, 1000))(t) }},
		{"Probe", func(t *testing.T) {
			got, ok, err := store.Probe(ctx, []bson.ObjectID{qid}, now, nil)
			if err != nil || !ok || got != qid {
				t.Fatalf("probe: %s, %v, %v; want the good queue", got.Hex(), ok, err)
			}
		}},
		{"Malformed", func(t *testing.T) {
			for _, m := range val(store.Malformed(ctx, []bson.ObjectID{qid}))(t) {
				if _, err := store.FailMalformed(ctx, m, node, now); err != nil {
					t.Errorf("fail malformed task %s: %v", m.ID.Hex(), err)
				}
			}
		}},
		{"FailMalformed", func(t *testing.T) {}}, // above
		{"Irregular", func(t *testing.T) {
			for _, task := range val(store.Irregular(ctx, []bson.ObjectID{qid}, nil))(t) {
				if len(task.Malformed()) > 0 {
					if _, err := store.FailQueued(ctx, task, node, "unreadable", now); err != nil {
						t.Errorf("fail task %s: %v", task.ID.Hex(), err)
					}
					continue
				}
				if _, err := store.Normalize(ctx, task); err != nil {
					t.Errorf("normalize task %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"Normalize", func(t *testing.T) {}},  // above
		{"FailQueued", func(t *testing.T) {}}, // above
		{"FillCounts", func(t *testing.T) {
			if _, err := store.FillCounts(ctx, queues); err != nil {
				t.Fatal(err)
			}
		}},
		{"CancelQueued", func(t *testing.T) { val(store.CancelQueued(ctx, now))(t) }},
		{"Held", func(t *testing.T) {
			mine := val(store.Held(ctx, node, false))(t)
			val(store.Held(ctx, node, true))(t)
			for _, task := range mine {
				if _, err := store.Rescue(ctx, task, nil, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: "test"}, 0, now); err != nil {
					t.Errorf("rescue task %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"Rescue", func(t *testing.T) {}}, // above
		{"NodeTasks", func(t *testing.T) { val(store.NodeTasks(ctx, node))(t) }},
		{"ReleaseClaims", func(t *testing.T) { val(store.ReleaseClaims(ctx, "nobody-claims", now))(t) }},
		{"ReleaseReady", func(t *testing.T) { val(store.ReleaseReady(ctx, now))(t) }},
		{"Register", func(t *testing.T) {
			for _, b := range val(store.BlockedTasks(ctx, []bson.ObjectID{qid}, 1000))(t) {
				if b.Problem != "" {
					if _, err := store.FailBlocked(ctx, b, b.Problem, now); err != nil {
						t.Errorf("fail blocked %s: %v", b.ID.Hex(), err)
					}
					continue
				}
				if _, err := store.Register(ctx, b, b.After); err != nil {
					t.Errorf("register %s: %v", b.ID.Hex(), err)
				}
			}
		}},
		{"FailBlocked", func(t *testing.T) {}}, // above
		{"CancelDependents", func(t *testing.T) { val(store.CancelDependents(ctx, hostileIDs, "test", now))(t) }},
		{"SettleDependents", func(t *testing.T) {
			var ended []queue.EndedTask
			for i, id := range hostileIDs {
				ended = append(ended, queue.EndedTask{ID: id, Status: []int{queue.StatusSucceeded, queue.StatusFailed, queue.StatusCancelled}[i%3]})
			}
			if _, _, err := store.SettleDependents(ctx, ended, now); err != nil {
				t.Fatal(err)
			}
		}},
		{"RetryEnded", func(t *testing.T) {
			for _, task := range val(store.RetryCandidates(ctx, queue.TaskFilter{Queues: []bson.ObjectID{qid}, Limit: 50}))(t) {
				if _, err := store.RetryEnded(ctx, task, now); err != nil {
					t.Errorf("retry %s: %v", task.ID.Hex(), err)
				}
			}
		}},
		{"Heartbeat", func(t *testing.T) {
			if _, _, err := store.Heartbeat(ctx, node, []queue.NodeQueue{}, nil, now); err != nil {
				t.Fatal(err)
			}
		}},
		{"ReadFacts", func(t *testing.T) {
			facts := val(store.ReadFacts(ctx, now, time.Minute))(t)
			for _, id := range append(slices.Clone(good), hostileIDs...) {
				task, err := store.Task(ctx, id)
				if err != nil || task == nil {
					continue
				}
				if r, err := store.Why(ctx, facts, *task); err != nil || len(r) == 0 {
					t.Errorf("why %s: %v, %v", id.Hex(), r, err)
				}
			}
		}},
		{"Why", func(t *testing.T) {}}, // above
		{"OldestReady", func(t *testing.T) {
			if _, _, err := store.OldestReady(ctx, qid, now); err != nil {
				t.Fatal(err)
			}
		}},
		{"PauseQueue", func(t *testing.T) {
			qs, _, err := store.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				if _, err := store.PauseQueue(ctx, q.ID, "test", now); err != nil {
					t.Errorf("pause %s: %v", q.ID.Hex(), err)
				}
				if _, err := store.ResumeQueue(ctx, q.ID); err != nil {
					t.Errorf("resume %s: %v", q.ID.Hex(), err)
				}
			}
		}},
		{"ResumeQueue", func(t *testing.T) {}}, // above
		{"ForgetNode", func(t *testing.T) {
			// Refusals are answers: what is tried is that no document
			// breaks the reads.
			for _, n := range val(store.Nodes(ctx))(t) {
				_, _ = store.ForgetNode(ctx, n.Name, now, time.Minute)
			}
		}},
		{"FixCounts", func(t *testing.T) {
			for _, d := range val(store.CheckCounts(ctx))(t) {
				if d.Drifted() {
					if _, err := store.FixCounts(ctx, d); err != nil {
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
				if i > 2*len(tasks)+10 {
					t.Fatal("claims go on for ever: something is claimed again and again")
				}
				c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: node, At: time.Now()})
				if err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
				if !ok {
					break
				}
				if c.Malformed != nil {
					malformed++
					if _, err := store.FailClaimed(ctx, *c.Malformed, node, time.Now()); err != nil {
						t.Errorf("fail claimed %s: %v", c.Malformed.ID, err)
					}
					continue
				}
				claimed[c.ID] = true
				// What a runner reads when it starts the task.
				runner := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Started: 1, Host: "h"}
				if _, ok, err := store.Start(ctx, c.ID, node, runner, time.Now()); err != nil || !ok {
					t.Errorf("start %s: %v, %v", c.ID.Hex(), ok, err)
				}
			}
			for _, id := range good {
				if !claimed[id] {
					t.Errorf("good task %s was not claimed", id.Hex())
				}
			}
			metMalformed.Add(int64(malformed))
			left, err := db.Collection("tasks").CountDocuments(ctx, queue.ClaimFilter(time.Now(), nil, qid))
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
		{"ReleaseLost", func(t *testing.T) { val(store.ReleaseLost(ctx, []bson.ObjectID{qid}, node, now))(t) }},
		{"Stats", func(t *testing.T) {
			val(store.Stats(ctx, queue.StatsQuery{Step: time.Minute, Since: now.Add(-time.Hour), Queue: qid}))(t)
		}},
	}

	tried := map[string]bool{}
	for _, c := range calls {
		tried[c.method] = true
	}
	typ := reflect.TypeOf(store)
	var missing []string
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if !tried[name] && storeWrites[name] == "" {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("methods of Store neither tried against hostile documents nor listed as writes: %v", missing)
	}
	for _, c := range calls {
		if _, ok := typ.MethodByName(c.method); !ok {
			t.Errorf("%s is not a method of Store", c.method)
		}
		t.Run(c.method, func(t *testing.T) {
			// Each query has the time a test has: a query that a
			// hostile document slows down fails on its own.
			ctx = dentest.Context(t)
			c.try(t)
		})
	}
	// The checks below have a context of their own: the first was taken
	// before the queries, which a loaded machine has seen take longer
	// than its five minutes.
	ctx = dentest.Context(t)
	// What the queries did to them, every good task is still as it was or
	// was claimed; none was failed for another's sake.
	for _, id := range good {
		raw, err := db.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := raw.Lookup("status").AsInt64OK(); st != queue.StatusRunning {
			t.Errorf("good task %s: status %d, want running", id.Hex(), st)
		}
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
