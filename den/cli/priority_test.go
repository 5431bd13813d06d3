package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den task add --priority N writes priority: N (0 writes nothing), den task
// list shows it, and den task why says when a task waits behind tasks of
// higher priority, and how many.
func TestTaskAddPriority(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "p", demo.Name, 1, "fifo")
	nodeDoc(t, db, "live", time.Now().Add(time.Minute), nil, qid)
	denDB(t, db, "{\"i\": 1}\n{\"i\": 2}\n", "task", "add", "p").must(t, ExitOK)
	denDB(t, db, "{\"i\": 3}\n{\"i\": 4}\n", "task", "add", "p", "--priority", "10").must(t, ExitOK)
	denDB(t, db, "{\"i\": 5}\n", "task", "add", "p", "--priority", "0").must(t, ExitOK)
	denDB(t, db, "{\"i\": 6}\n", "task", "add", "p", "--priority", "-3").must(t, ExitOK)
	cur, err := db.Collection("tasks").Find(dentest.Context(t), bson.D{}, options.Find().SetSort(bson.D{{Key: "parameters.i", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []bson.ObjectID
	var prios []any
	for cur.Next(dentest.Context(t)) {
		ids = append(ids, cur.Current.Lookup("_id").ObjectID())
		v := cur.Current.Lookup(queue.FieldPriority)
		if v.Type == 0 {
			prios = append(prios, nil)
		} else {
			prios = append(prios, v.Int64())
		}
	}
	want := []any{nil, nil, int64(10), int64(10), nil, int64(-3)}
	for i := range want {
		if i >= len(prios) || prios[i] != want[i] {
			t.Fatalf("priorities as stored %v, want %v", prios, want)
		}
	}
	if out := denDB(t, db, "", "task", "list", "--queue", "p").must(t, ExitOK).stdout; !strings.Contains(out, "PRIO") || strings.Count(out, " 10 ") != 2 || !strings.Contains(out, " -3 ") {
		t.Errorf("den task list does not show the priorities:\n%s", out)
	}
	for _, tc := range []struct {
		task int
		says string
	}{
		{1, "after the 2 queued tasks of higher priority than its 0, then after the 1 of its priority queued before it (fifo)"},
		{3, "after the 0 queued tasks of higher priority than its 10, then after the 1 of its priority queued before it (fifo)"},
		{5, "after the 5 queued tasks of higher priority than its -3, then after the 0 of its priority queued before it (fifo)"},
	} {
		r := denDB(t, db, "", "task", "why", ids[tc.task].Hex()).must(t, ExitOK)
		if !strings.Contains(r.stdout, tc.says) {
			t.Errorf("den task why of task %d said:\n%s\nwant %q", tc.task+1, r.stdout, tc.says)
		}
	}
}
