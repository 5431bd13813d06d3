package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// den queue create writes the protocol's queue document with den's
// control defaults, refuses bad values and duplicates; list counts tasks
// by state; set changes settings with the same checks; delete refuses a
// queue with unfinished tasks unless --force, and asks for confirmation.
func TestQueueCommands(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)

	r := denDB(t, db, "", "queue", "create", "resize", "--plugin", demo.Name, "--maxthreads", "4",
		"--timeout", "10m", "--max-retries", "3", "--retry-delay", "30", "--max-termination-time", "5s", "--gfs", "auto", "--json").must(t, ExitOK)
	var created struct{ ID, Name string }
	r.decode(t, &created)
	id, err := bson.ObjectIDFromHex(created.ID)
	if err != nil || created.Name != "resize" {
		t.Fatalf("create printed %s", r.stdout)
	}
	q := queueDoc(t, db, id)
	want := bson.M{"name": "resize", "constructor": demo.Name, "maxthreads": int32(4), "sort": "fifo", "gfs": "auto",
		"timeout": int64(600), "max_retries": int32(3), "retry_delay": int64(30), "max_termination_time": int64(5),
		"count_todo": int64(0), "count_total": int64(0)}
	for k, v := range want {
		if q[k] != v {
			t.Errorf("queue %s = %#v, want %#v", k, q[k], v)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"queue", "create", "resize", "--plugin", demo.Name}, ExitError, "exists"},
		{[]string{"queue", "create", "x"}, ExitUsage, "--plugin"},
		{[]string{"queue", "create", "x", "--plugin", demo.Name, "--max-retries", "many"}, ExitUsage, "max_retries"},
		{[]string{"queue", "create", "x", "--plugin", demo.Name, "--timeout", "soon"}, ExitUsage, "timeout"},
		{[]string{"queue", "create", "x", "--plugin", demo.Name, "--maxthreads", "2", "--threads", "3"}, ExitUsage, "not both"},
		{[]string{"queue", "create", "x", "--plugin", demo.Name, "--sort", "random"}, ExitUsage, "sort"},
		{[]string{"queue", "set", "resize", "colour=blue"}, ExitUsage, "unknown queue setting"},
		{[]string{"queue", "set", "resize", "maxthreads"}, ExitUsage, "key=value"},
		{[]string{"queue", "set", "resize", "gfs=sometimes"}, ExitUsage, "gfs"},
	} {
		r := denDB(t, db, "", tc.args...).must(t, tc.code, tc.args...)
		if !strings.Contains(r.stderr, tc.say) {
			t.Errorf("den %v said %q, want %q", tc.args, r.stderr, tc.say)
		}
	}
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 1 {
		t.Fatalf("%d queues after refused creates, want 1", n)
	}

	// Tasks in every state, counted from the tasks.
	ids := dentest.Tasks(t, db, id, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}}, bson.D{{Key: "i", Value: 3}},
		bson.D{{Key: "i", Value: 4}}, bson.D{{Key: "i", Value: 5}}, bson.D{{Key: "i", Value: 6}})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "n1"}})
	setTask(t, db, ids[2], bson.D{{Key: "status", Value: 1}})
	setTask(t, db, ids[3], bson.D{{Key: "status", Value: 2}})
	setTask(t, db, ids[4], bson.D{{Key: "status", Value: -6}})
	setTask(t, db, ids[5], bson.D{{Key: "status", Value: -5}})
	var rows []queueRow
	denDB(t, db, "", "queue", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 1 || rows[0].Todo != 1 || rows[0].Running != 1 || rows[0].Done != 1 || rows[0].Failed != 2 || rows[0].Cancelled != 1 ||
		rows[0].Limit != 4 || rows[0].Global {
		t.Fatalf("queue list: %+v", rows)
	}
	table := denDB(t, db, "", "queue", "list").must(t, ExitOK).stdout
	if !strings.Contains(table, "resize") || !strings.Contains(table, "4 per node") {
		t.Errorf("queue list table:\n%s", table)
	}
	var shown struct {
		Queue         map[string]any   `json:"queue"`
		TasksByStatus map[string]int64 `json:"tasks_by_status"`
		Tasks         int64            `json:"tasks"`
	}
	denDB(t, db, "", "queue", "show", "resize", "--json").must(t, ExitOK).decode(t, &shown)
	if shown.Tasks != 6 || shown.TasksByStatus["-2"] != 1 || shown.TasksByStatus["-6"] != 1 || shown.Queue["name"] != "resize" {
		t.Fatalf("queue show: %+v", shown)
	}
	if out := denDB(t, db, "", "queue", "show", id.Hex()).must(t, ExitOK).stdout; !strings.Contains(out, "timeout: 600") || !strings.Contains(out, "-6 orphaned") {
		t.Errorf("queue show by id:\n%s", out)
	}

	// set: the limit becomes queue-wide, timeout goes, sort changes.
	denDB(t, db, "", "queue", "set", "resize", "threads=8", "timeout=none", "sort=LIFO").must(t, ExitOK)
	q = queueDoc(t, db, id)
	if q["threads"] != int32(8) || q["maxthreads"] != nil || q["timeout"] != nil || q["sort"] != "lifo" {
		t.Fatalf("after set: %v", q)
	}

	// delete: refused while tasks are unfinished; --force needs --yes
	// when stdin is not a terminal.
	r = denDB(t, db, "", "queue", "delete", "resize").must(t, ExitError)
	if !strings.Contains(r.stderr, "2 unfinished tasks") {
		t.Errorf("delete said %q", r.stderr)
	}
	denDB(t, db, "y\n", "queue", "delete", "resize", "--force").must(t, ExitUsage)
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 1 {
		t.Fatalf("queue deleted without confirmation")
	}
	denDB(t, db, "", "queue", "delete", "resize", "--force", "--yes").must(t, ExitOK)
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 0 {
		t.Fatalf("queue not deleted")
	}
	if n := dentest.CountTasks(t, db, bson.D{}); n != 6 {
		t.Fatalf("%d tasks left after deleting their queue, want all 6", n)
	}
}

// A task cancelled while queued stays in Disbatch's count_todo: den queue
// list shows it under CANCELLED, not under TODO, beside count_todo 1, each
// under its own name.
func TestQueueListCountsACancelledTaskApart(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "resize", demo.Name, 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -5}}}})
	var rows []queueRow
	denDB(t, db, "", "queue", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 1 || rows[0].Todo != 0 || rows[0].Cancelled != 1 || rows[0].CountTodo == nil || *rows[0].CountTodo != 1 {
		t.Fatalf("den queue list --json: %+v", rows)
	}
	list := denDB(t, db, "", "queue", "list").must(t, ExitOK)
	if !strings.Contains(list.stdout, "CANCELLED") || !strings.Contains(list.stdout, "COUNT_TODO/TOTAL") || !strings.Contains(list.stdout, "1/1") {
		t.Errorf("den queue list:\n%s", list.stdout)
	}
	help := denDB(t, db, "", "queue", "list", "--help").must(t, ExitOK)
	if !strings.Contains(help.stdout, "cancelled and orphaned ones too") {
		t.Errorf("den queue list --help does not say what count_todo counts:\n%s", help.stdout)
	}
}
