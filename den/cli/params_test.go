package cli

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// den task add writes the parameters under the queue's schema: params in
// a Disbatch 4 queue (plugin), parameters in a protocol queue
// (constructor); den task list --param finds a task under either, a
// number as a number and quoted text as text.
func TestTaskAddParamsFollowTheQueue(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	old := dentest.Queue(t, db, "old", demo.Name, 1, "fifo")
	d4 := bson.NewObjectID()
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "_id", Value: d4}, {Key: "name", Value: "d4"}, {Key: "plugin", Value: demo.Name},
		{Key: "threads", Value: 1}, {Key: "count_todo", Value: 0}, {Key: "count_total", Value: 0}})
	var added struct{ IDs []string }
	denDB(t, db, "{\"n\":7}\n", "task", "add", "d4", "--json").must(t, ExitOK).decode(t, &added)
	denDB(t, db, "{\"n\":7}\n", "task", "add", "old").must(t, ExitOK)
	for _, c := range []struct {
		queue        bson.ObjectID
		field, other string
	}{{d4, "params", "parameters"}, {old, "parameters", "params"}} {
		if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: c.queue}, {Key: c.field + ".n", Value: 7}}); n != 1 {
			t.Errorf("%d tasks with %s.n 7 in queue %s, want 1", n, c.field, c.queue.Hex())
		}
		if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: c.queue}, {Key: c.other, Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
			t.Errorf("%d tasks with %s in queue %s, want none", n, c.other, c.queue.Hex())
		}
	}
	// As a Perl Disbatch 4 writes it; and a text "7".
	perl := bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: perl}, {Key: "queue", Value: d4}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
		{Key: "params", Value: bson.D{{Key: "n", Value: int32(7)}}}})
	text := dentest.Tasks(t, db, d4, bson.D{{Key: "n", Value: "7"}})[0]
	for _, tc := range []struct {
		param string
		want  []string
	}{
		{"n=7", []string{text.Hex(), perl.Hex(), added.IDs[0]}},
		{`n="7"`, []string{text.Hex()}},
	} {
		var rows []struct{ ID string }
		denDB(t, db, "", "task", "list", "--queue", "d4", "--param", tc.param, "--json").must(t, ExitOK).decode(t, &rows)
		var got []string
		for _, r := range rows {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--param %s: %v, want %v", tc.param, got, tc.want)
		}
	}
	denDB(t, db, "", "task", "list", "--param", "a.b=1").must(t, ExitUsage)
	denDB(t, db, "", "task", "list", "--param", "n").must(t, ExitUsage)
}
