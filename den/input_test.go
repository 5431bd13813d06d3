package den_test

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// What users, shells and Perl nodes write is read, not silently ignored:
// start_after as epoch seconds or a string waits for its time; cancel as 1
// or "yes" cancels; a value that means nothing fails the task with the
// reason in its stderr; the node keeps serving the queue.
func TestTaskFieldsAsWritersWriteThem(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 4, "fifo")
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Minute)
	cases := []struct {
		name   string
		field  bson.E
		want   int64
		stderr string
	}{
		{"start_after epoch seconds, future", bson.E{Key: "start_after", Value: future.Unix()}, -2, ""},
		{"start_after string, future", bson.E{Key: "start_after", Value: future.UTC().Format(time.RFC3339)}, -2, ""},
		{"start_after epoch seconds, past", bson.E{Key: "start_after", Value: float64(past.Unix())}, 1, ""},
		{"start_after nonsense", bson.E{Key: "start_after", Value: "whenever"}, 2, "start_after is"},
		{"cancel 1", bson.E{Key: "cancel", Value: int32(1)}, -5, "cancelled before it started"},
		{"cancel yes", bson.E{Key: "cancel", Value: "yes"}, -5, "cancelled before it started"},
		{"cancel 0", bson.E{Key: "cancel", Value: 0.0}, 1, ""},
		{"cancel maybe", bson.E{Key: "cancel", Value: "maybe"}, 2, "cancel is"},
		{"timeout string", bson.E{Key: "timeout", Value: "60"}, 1, ""},
		{"timeout nonsense", bson.E{Key: "timeout", Value: "soon"}, 2, "timeout is"},
		{"max_retries fraction", bson.E{Key: "max_retries", Value: 1.5}, 2, "max_retries is"},
		{"retry_delay array", bson.E{Key: "retry_delay", Value: bson.A{1}}, 2, "retry_delay is"},
		{"max_termination_time negative", bson.E{Key: "max_termination_time", Value: -3}, 2, "max_termination_time is"},
	}
	ids := dentest.Tasks(t, db, qid, sleepTasks(len(cases), 0)...)
	for i, c := range cases {
		if _, err := db.Collection("tasks").UpdateOne(dentest.Context(t), bson.D{{Key: "_id", Value: ids[i]}}, bson.D{{Key: "$set", Value: bson.D{c.field}}}); err != nil {
			t.Fatal(err)
		}
	}
	startNode(t, db, "n")
	for i, c := range cases {
		if c.want == -2 {
			continue
		}
		raw := dentest.WaitStatus(t, db, ids[i], c.want)
		if got := raw.Lookup("stderr").StringValue(); !strings.Contains(got, c.stderr) {
			t.Errorf("%s: stderr %q lacks %q", c.name, got, c.stderr)
		}
		ran, err := db.Collection("runs").CountDocuments(dentest.Context(t), bson.D{{Key: "task_id", Value: ids[i]}})
		if err != nil {
			t.Fatal(err)
		}
		if (ran > 0) != (c.want == 1) {
			t.Errorf("%s: ran %d times, status %d", c.name, ran, c.want)
		}
	}
	// Passes after all the above: the future tasks wait, as ISODates.
	waitPasses(t, db, []string{"n"}, 2, 200*time.Millisecond)
	for i, c := range cases {
		if c.want != -2 {
			continue
		}
		raw := dentest.Task(t, db, ids[i])
		if st, _ := raw.Lookup("status").AsInt64OK(); st != -2 {
			t.Errorf("%s: status %d before its start_after", c.name, st)
		}
		if at, ok := raw.Lookup("start_after").TimeOK(); !ok || at.Unix() != future.Unix() {
			t.Errorf("%s: start_after is now %s, want the ISODate %s", c.name, raw.Lookup("start_after"), future.UTC())
		}
	}
	var q bson.Raw
	q, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: qid}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	// 13 tasks: 2 wait, 2 are cancelled (-5, which the protocol counts as
	// todo); the other 9 are done.
	if todo, _ := q.Lookup("count_todo").AsInt64OK(); todo != 4 {
		t.Errorf("count_todo %d, want 4", todo)
	}
}

// A queue whose settings cannot be read is skipped with one warning, and
// served again once fixed; counts that are not numbers are recounted once,
// not every pass.
func TestQueueFieldsAsWritersWriteThem(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	bad := []bson.E{
		{Key: "gfs", Value: "sometimes"},
		{Key: "gfs", Value: bson.A{true}},
		{Key: "gfs", Value: int32(2)},
		{Key: "timeout", Value: "soon"},
	}
	var qids []bson.ObjectID
	for i, e := range bad {
		qids = append(qids, dentest.Queue(t, db, "bad"+string(rune('a'+i)), sleepPlugin, 1, "fifo", e))
	}
	counted := dentest.Queue(t, db, "counted", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, counted, sleepTasks(3, 0)...)
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: counted}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: "three"}}}}); err != nil {
		t.Fatal(err)
	}
	var held []bson.ObjectID
	for _, q := range qids {
		held = append(held, dentest.Tasks(t, db, q, sleepTasks(1, 0)...)[0])
	}
	n := startNode(t, db, "n")
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	waitPasses(t, db, []string{"n"}, 2, 200*time.Millisecond)
	for i, id := range held {
		if st := status(t, db, id); st != -2 {
			t.Errorf("queue with %v: its task has status %d; the queue must be skipped", bad[i], st)
		}
	}
	if c := n.Logs.FilterMessage("queue document skipped").Len(); c != len(bad) {
		t.Errorf("%d queue warnings, want one per bad queue (%d)", c, len(bad))
	}
	if c := n.Logs.FilterMessageSnippet("counts that are not numbers").Len(); c != 1 {
		t.Errorf("recount logged %d times, want once", c)
	}
	q, err := db.Collection("queues").FindOne(ctx, bson.D{{Key: "_id", Value: counted}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if todo, ok := q.Lookup("count_todo").AsInt64OK(); !ok || todo != 0 {
		t.Errorf("count_todo is %s, want 0 after the recount and three finished tasks", q.Lookup("count_todo"))
	}
	// Fixed, a queue is served.
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: qids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "gfs", Value: "auto"}}}}); err != nil {
		t.Fatal(err)
	}
	dentest.WaitStatus(t, db, held[0], 1)
}

// Every document of the fuzz seed corpus (testdata/odd-tasks.jsonl, the
// seeds of queue.FuzzDecodeTask), inserted as a queued task, gets a clear
// outcome from a live node: it runs (1), is cancelled (-5), or fails (2)
// with den's reason in its stderr; and the node keeps running.
func TestOddTasksGetAnOutcome(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 4, "fifo")
	f, err := os.Open("../testdata/odd-tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[bson.ObjectID]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d bson.D
		if err := bson.UnmarshalExtJSON(sc.Bytes(), false, &d); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		id := bson.NewObjectID()
		doc := append(bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}}, d...)
		if _, err := db.Collection("tasks").InsertOne(dentest.Context(t), doc); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		lines[id] = sc.Text()
	}
	if len(lines) < 20 {
		t.Fatalf("%d seed documents; the corpus has more", len(lines))
	}
	startNode(t, db, "n")
	for id, line := range lines {
		var raw bson.Raw
		dentest.Eventually(t, 2*time.Minute, "an outcome for "+line, func() bool {
			raw = dentest.Task(t, db, id)
			st, _ := raw.Lookup("status").AsInt64OK()
			return st == 1 || st == 2 || st == -5
		})
		st, _ := raw.Lookup("status").AsInt64OK()
		if stderr, _ := raw.Lookup("stderr").StringValueOK(); st == 2 && !strings.Contains(stderr, "den: ") {
			t.Errorf("%s failed without den's reason: stderr %q", line, stderr)
		}
		t.Logf("%-80s -> %d", line, st)
	}
	waitPasses(t, db, []string{"n"}, 2, 200*time.Millisecond)
}

// A queued task whose cancel is written as a number or a word is
// cancelled by the sweep that rewrites it, not the one after (which may
// come minutes later on a slow server: here an hour).
func TestOneSweepCancelsWhatItRewrites(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	for i, v := range []any{int32(1), "yes"} {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[i]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: v}}}})
	}
	startNode(t, db, "n", func(c *den.Config) { c.SweepEvery = time.Hour })
	waitPasses(t, db, []string{"n"}, 2, 0)
	for _, id := range ids {
		if st := status(t, db, id); st != -5 {
			t.Errorf("task %s: status %d after the first sweep, want -5 (cancelled)", id.Hex(), st)
		}
	}
}
