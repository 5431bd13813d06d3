package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// The claim, with den's start_after and cancel conditions, still uses the
// protocol's {node, status, queue, _id} index, for one queue and for the
// most queues one claim names (then merging the index ranges in _id order,
// with no in-memory sort). MongoDB's explain shows it; FerretDB (the
// embedded server) never uses indexes for such filters, so there the test
// is skipped. Run with DEN_TEST_MONGODB_URI to check.
func TestClaimUsesIndex(t *testing.T) {
	t.Parallel()
	for _, queues := range []int{1, queue.MaxClaimQueues} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			t.Parallel()
			explainClaim(t, queues)
		})
	}
}

func explainClaim(t *testing.T, queues int) {
	db := dentest.DB(t)
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	var qids []bson.ObjectID
	for i := range queues {
		qid := dentest.Queue(t, db, fmt.Sprint("q", i), "P", 1, "fifo")
		dentest.Tasks(t, db, qid, params(3)...)
		qids = append(qids, qid)
	}
	var out bson.Raw
	err := db.RunCommand(dentest.Context(t), bson.D{{Key: "explain", Value: bson.D{
		{Key: "findAndModify", Value: "tasks"},
		// As a node claims: with the condition on requested_resources.
		{Key: "query", Value: queue.ClaimFilter(time.Now(), &queue.Resources{MemoryMB: 4096, CPUs: 2}, qids...)},
		{Key: "sort", Value: queue.ClaimSort(queue.SortFIFO)},
		{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -1}}}}},
	}}}).Decode(&out)
	if err != nil {
		t.Fatal(err)
	}
	plan := out.Lookup("queryPlanner").String()
	if out.Lookup("serverInfo", "ferretdbVersion").Type != 0 {
		t.Skipf("the server is FerretDB, which uses no index for the claim's filter, so its plan proves nothing "+
			"(set %s to a MongoDB to check); plan: %s", dentest.EnvURI, plan)
	}
	if plan == "" {
		t.Fatalf("explain returned no queryPlanner: %s", out)
	}
	if !strings.Contains(plan, "IXSCAN") || !strings.Contains(plan, "node_1_status_1_queue_1") || strings.Contains(plan, "COLLSCAN") || strings.Contains(plan, `"SORT"`) {
		t.Fatalf("claim does not use the claim index: %s", plan)
	}
}

// The read of the queues with work, which a node makes every pass, uses
// den's {count_todo} index and the _id index: no collection scan of the
// queues, however many there are. (Skipped on FerretDB, as above.)
func TestQueuesWithWorkUsesIndexes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	var had []bson.ObjectID
	for i := range 200 {
		qid := dentest.Queue(t, db, fmt.Sprint("q", i), "P", 1, "fifo")
		if i%50 == 0 {
			had = append(had, qid)
		}
	}
	var out bson.Raw
	err := db.RunCommand(dentest.Context(t), bson.D{{Key: "explain", Value: bson.D{
		{Key: "find", Value: "queues"},
		{Key: "filter", Value: queue.QueuesWithWorkFilter(queue.WorkRead{IDs: had, Since: time.Now().Add(-time.Hour)})},
	}}}).Decode(&out)
	if err != nil {
		t.Fatal(err)
	}
	plan := out.Lookup("queryPlanner").String()
	if out.Lookup("serverInfo", "ferretdbVersion").Type != 0 {
		t.Skipf("the server is FerretDB, which uses no index for this filter, so its plan proves nothing (set %s to a MongoDB to check); plan: %s", dentest.EnvURI, plan)
	}
	if !strings.Contains(plan, "count_todo_1") || strings.Contains(plan, "COLLSCAN") {
		t.Fatalf("the read of the queues with work does not use the indexes: %s", plan)
	}
}

// The claim steps of a queue with priorities that sort on priority (above
// and below 0) use den's partial {queue, priority, _id} index, with no
// in-memory sort of a fifo queue's tasks, for one queue and for the most
// one claim names. Skipped on FerretDB, as above (which has no partial
// indexes either).
func TestPriorityClaimUsesIndex(t *testing.T) {
	t.Parallel()
	for _, queues := range []int{1, queue.MaxClaimQueues} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			store := queue.NewStore(db)
			if _, err := store.EnsureIndexes(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			var qids []bson.ObjectID
			for i := range queues {
				qid := dentest.Queue(t, db, fmt.Sprint("q", i), "P", 1, "fifo")
				dentest.Tasks(t, db, qid, params(3)...)
				dentest.TaskWith(t, db, qid, bson.D{}, bson.E{Key: queue.FieldPriority, Value: 5})
				qids = append(qids, qid)
			}
			var out bson.Raw
			err := db.RunCommand(dentest.Context(t), bson.D{{Key: "explain", Value: bson.D{
				{Key: "findAndModify", Value: "tasks"},
				{Key: "query", Value: append(queue.ClaimFilter(time.Now(), nil, qids...), bson.E{Key: queue.FieldPriority, Value: bson.D{{Key: "$gt", Value: 0}}})},
				{Key: "sort", Value: queue.PrioritySort(queue.SortFIFO)},
				{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -1}}}}},
			}}}).Decode(&out)
			if err != nil {
				t.Fatal(err)
			}
			plan := out.Lookup("queryPlanner").String()
			if out.Lookup("serverInfo", "ferretdbVersion").Type != 0 {
				t.Skipf("the server is FerretDB, which has no partial indexes and uses none for the claim's filter (set %s to a MongoDB to check)", dentest.EnvURI)
			}
			if !strings.Contains(plan, "queue_1_priority_-1__id_1") || strings.Contains(plan, "COLLSCAN") || strings.Contains(plan, `"SORT"`) {
				t.Fatalf("the claim by priority does not use the priority index: %s", plan)
			}
		})
	}
}
