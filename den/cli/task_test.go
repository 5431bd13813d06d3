package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/demo"
)

// den task add inserts one task per line in batches and raises the counts
// by exactly what it inserted; a malformed line is reported by number and
// nothing is inserted.
func TestTaskAdd(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "bulk", demo.Name, 1, "fifo")

	var lines strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&lines, "{\"commands\": \"a\", \"n\": %d}\n", i)
		if i == 10 {
			lines.WriteString("\n") // blank lines are skipped
		}
	}
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := denDB(t, db, "", "task", "add", "bulk", "--file", file, "--batch", "1000").must(t, ExitOK)
	if !strings.Contains(r.stdout, "added 2500 tasks") {
		t.Errorf("summary %q", r.stdout)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1}}); n != 2500 {
		t.Fatalf("%d queued tasks, want 2500", n)
	}
	if todo, total := counts(t, db, qid); todo != 2500 || total != 2500 {
		t.Fatalf("counts %d/%d, want 2500/2500", todo, total)
	}
	last, err := db.Collection("tasks").FindOne(dentest.Context(t), bson.D{{Key: "parameters.n", Value: 2499}}).Raw()
	if err != nil {
		t.Fatalf("last line's task: %v", err)
	}
	if last.Lookup("parameters", "commands").StringValue() != "a" || last.Lookup("ctime").Type != bson.TypeDateTime || last.Lookup("stdout").Type != bson.TypeNull {
		t.Fatalf("task document %v", last)
	}

	// From stdin, with a bad line: nothing inserted, the line named.
	r = denDB(t, db, "{\"commands\":\"a\"}\n[1,2]\n{\"commands\":\"b\"}\n{\"commands\":\n", "task", "add", "bulk").must(t, ExitError)
	if !strings.Contains(r.stderr, "line 2: not a JSON object") || !strings.Contains(r.stderr, "line 4:") || !strings.Contains(r.stderr, "nothing was inserted") {
		t.Errorf("bad lines reported as %q", r.stderr)
	}
	if todo, total := counts(t, db, qid); todo != 2500 || total != 2500 || dentest.CountTasks(t, db, bson.D{}) != 2500 {
		t.Fatalf("a refused file changed the queue: counts %d/%d", todo, total)
	}
	var added struct{ Inserted int }
	denDB(t, db, "{\"commands\":\"ab\"}\n", "task", "add", qid.Hex(), "--json").must(t, ExitOK).decode(t, &added)
	if added.Inserted != 1 || dentest.CountTasks(t, db, bson.D{{Key: "parameters.commands", Value: "ab"}}) != 1 {
		t.Fatalf("stdin task: %+v", added)
	}
	denDB(t, db, "{}\n", "task", "add", "nope").must(t, ExitError)
}

// den task list filters by queue, status (names or codes), node and
// creation time, newest first, up to --limit.
func TestTaskList(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	a := dentest.Queue(t, db, "a", demo.Name, 1, "fifo")
	b := dentest.Queue(t, db, "b", demo.Name, 1, "fifo")
	old := bson.NewObjectIDFromTimestamp(time.Now().Add(-48 * time.Hour))
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: old}, {Key: "queue", Value: a}, {Key: "status", Value: 2}, {Key: "node", Value: "n1"}, {Key: "parameters", Value: bson.D{}}})
	ta := dentest.Tasks(t, db, a, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}}, bson.D{{Key: "i", Value: 3}})
	tb := dentest.Tasks(t, db, b, bson.D{{Key: "i", Value: 4}})
	setTask(t, db, ta[1], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "n1"}})
	setTask(t, db, ta[2], bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "n2"}, {Key: "outcome", Value: "timeout"}})

	list := func(args ...string) []string {
		t.Helper()
		var rows []taskRow
		denDB(t, db, "", append([]string{"task", "list", "--json"}, args...)...).must(t, ExitOK, args...).decode(t, &rows)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		args []string
		want []bson.ObjectID
	}{
		{nil, []bson.ObjectID{tb[0], ta[2], ta[1], ta[0], old}},
		{[]string{"--queue", "a"}, []bson.ObjectID{ta[2], ta[1], ta[0], old}},
		{[]string{"--queue", "a", "--status", "failed"}, []bson.ObjectID{ta[2], old}},
		{[]string{"--status", "0,queued"}, []bson.ObjectID{tb[0], ta[1], ta[0]}},
		{[]string{"--node", "n1"}, []bson.ObjectID{ta[1], old}},
		{[]string{"--since", "24h", "--status", "2"}, []bson.ObjectID{ta[2]}},
		{[]string{"--limit", "2"}, []bson.ObjectID{tb[0], ta[2]}},
		{[]string{"--outcome", "timeout,signal"}, []bson.ObjectID{ta[2]}},
	} {
		got := list(tc.args...)
		var want []string
		for _, id := range tc.want {
			want = append(want, id.Hex())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("task list %v:\n got %v\nwant %v", tc.args, got, want)
		}
	}
	out := denDB(t, db, "", "task", "list", "--queue", "b").must(t, ExitOK).stdout
	if !strings.Contains(out, tb[0].Hex()) || !strings.Contains(out, "-2 queued") || !strings.Contains(out, `{"i":4}`) {
		t.Errorf("table:\n%s", out)
	}
	denDB(t, db, "", "task", "list", "--status", "sleeping").must(t, ExitUsage)
	denDB(t, db, "", "task", "list", "--since", "yesterday").must(t, ExitUsage)
	denDB(t, db, "", "task", "list", "--outcome", "bad_luck").must(t, ExitUsage)
	if out := denDB(t, db, "", "task", "list", "--status", "failed").must(t, ExitOK).stdout; !strings.Contains(out, "OUTCOME") || !strings.Contains(out, "timeout") {
		t.Errorf("table without the outcome:\n%s", out)
	}
}

// den task show prints the document with dates and history, and where
// the output is: in the document, or which GridFS file.
func TestTaskShow(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
	file, err := gridfs.NewBucket(db, "tasks").Put(dentest.Context(t), "stderr", bson.D{{Key: "task_id", Value: id}}, []byte("oops\n"))
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	setTask(t, db, id, bson.D{{Key: "status", Value: 2}, {Key: "stdout", Value: "hello\n"}, {Key: "stderr", Value: file},
		{Key: "history", Value: bson.A{bson.D{{Key: "attempt", Value: 1}, {Key: "node", Value: "n1"}, {Key: "status", Value: 2}, {Key: "ended", Value: when}}}}})
	out := denDB(t, db, "", "task", "show", id.Hex()).must(t, ExitOK).stdout
	for _, want := range []string{"2 failed", "stdout: in the task document, 6 bytes", "stderr: GridFS file " + file.Hex() + " in tasks.files, 5 bytes",
		"history:", "attempt: 1", when.Local().Format("2006-01-02 15:04:05"), "den output " + id.Hex()} {
		if !strings.Contains(out, want) {
			t.Errorf("task show lacks %q:\n%s", want, out)
		}
	}
	var shown struct {
		Task   map[string]any `json:"task"`
		Output []outputPlace  `json:"output"`
	}
	denDB(t, db, "", "task", "show", id.Hex(), "--json").must(t, ExitOK).decode(t, &shown)
	if len(shown.Output) != 2 || shown.Output[0].Where != "inline" || shown.Output[1].Where != "gridfs" || shown.Output[1].File != file.Hex() || shown.Task["stdout"] != "hello\n" {
		t.Fatalf("task show --json: %+v", shown)
	}
}

// den task cancel sets cancel: true on tasks that have not ended, leaves
// ended ones alone, and exits 1 for an id that does not exist.
func TestTaskCancel(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "n1"}})
	setTask(t, db, ids[2], bson.D{{Key: "status", Value: 1}})
	denDB(t, db, "", "task", "cancel", ids[0].Hex(), ids[1].Hex(), ids[2].Hex()).must(t, ExitOK)
	for i, want := range []bool{true, true, false} {
		got, _ := dentest.Task(t, db, ids[i]).Lookup("cancel").BooleanOK()
		if got != want {
			t.Errorf("task %d: cancel %v, want %v", i, got, want)
		}
	}
	r := denDB(t, db, "", "task", "cancel", bson.NewObjectID().Hex()).must(t, ExitError)
	if !strings.Contains(r.stdout, "no such task") {
		t.Errorf("missing task reported as %q", r.stdout)
	}
}

// den task retry puts ended tasks back, by id or filter, keeps count_todo
// right (den counts check finds no drift after), and asks before retrying
// more than one.
func TestTaskRetry(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	// As the nodes leave them: finished tasks taken off count_todo,
	// cancelled and orphaned ones not.
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "n1"}, {Key: "exit_code", Value: 3}, {Key: "attempts", Value: 2},
		{Key: "outcome", Value: "exit_code"}, {Key: "outcome_reason", Value: "its program exited with code 3"}})
	setTask(t, db, ids[2], bson.D{{Key: "status", Value: -5}, {Key: "cancel", Value: true}})
	setTask(t, db, ids[3], bson.D{{Key: "status", Value: -6}, {Key: "orphan_reason", Value: "runner died"}})
	setTask(t, db, ids[4], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "n1"}})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -2}}}})
	denDB(t, db, "", "counts", "check").must(t, ExitOK)

	// More than one, no terminal, no --yes: refused, nothing changed.
	denDB(t, db, "y\n", "task", "retry", "--queue", "q").must(t, ExitUsage)
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -2}}); n != 1 {
		t.Fatalf("%d queued tasks after a refused retry, want 1", n)
	}
	// One id: no confirmation. A running task is not retried.
	denDB(t, db, "", "task", "retry", ids[1].Hex()).must(t, ExitOK)
	raw := dentest.Task(t, db, ids[1])
	if st, _ := raw.Lookup("status").AsInt64OK(); st != -2 || raw.Lookup("node").AsInt64() != -1 || raw.Lookup("exit_code").Type != 0 || raw.Lookup("attempts").AsInt64() != 0 ||
		raw.Lookup("outcome").Type != 0 || raw.Lookup("outcome_reason").Type != 0 {
		t.Fatalf("retried task: %s", raw)
	}
	r := denDB(t, db, "", "task", "retry", ids[4].Hex()).must(t, ExitError)
	if !strings.Contains(r.stderr, "only ended tasks") {
		t.Errorf("retry of a running task said %q", r.stderr)
	}
	var out struct {
		Retried []string `json:"retried"`
		Raised  int      `json:"count_todo_raised"`
	}
	denDB(t, db, "", "task", "retry", "--queue", "q", "--yes", "--json").must(t, ExitOK).decode(t, &out)
	if len(out.Retried) != 3 || out.Raised != 1 {
		t.Fatalf("retry by filter: %+v", out)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -2}, {Key: "node", Value: -1}}); n != 5 {
		t.Fatalf("%d queued tasks, want 5", n)
	}
	if todo, total := counts(t, db, qid); todo != 6 || total != 6 {
		t.Fatalf("counts %d/%d, want 6/6", todo, total)
	}
	denDB(t, db, "", "counts", "check").must(t, ExitOK)
	denDB(t, db, "", "task", "retry").must(t, ExitUsage)
}

// den output --follow waits for a running task to end and prints its
// output as it is stored, then exits 0.
func TestOutputFollow(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{})
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "n1"}})

	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"output", ids[0].Hex(), "--follow", "--mongo-uri", dentest.URI(), "--database", db.Name()},
			strings.NewReader(""), &out, &errOut)
	}()
	dentest.Eventually(t, time.Minute, "follow says it waits", func() bool { return strings.Contains(errOut.String(), "0 running on node n1") })
	select {
	case code := <-done:
		t.Fatalf("follow exited %d while the task runs: %s", code, errOut.String())
	default:
	}
	// The run stores its first output while still running, then ends.
	setTask(t, db, ids[0], bson.D{{Key: "stdout", Value: "first\n"}})
	dentest.Eventually(t, time.Minute, "first output printed", func() bool { return out.String() == "first\n" })
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 1}, {Key: "stdout", Value: "first\nsecond\n"}})
	select {
	case code := <-done:
		if code != 0 || out.String() != "first\nsecond\n" {
			t.Fatalf("follow: exit %d, printed %q; stderr %s", code, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("follow did not end when the task did")
	}

	// Ended with output in GridFS: printed from the file.
	file, err := gridfs.NewBucket(db, "tasks").Put(dentest.Context(t), "stdout", bson.D{{Key: "task_id", Value: ids[1]}}, []byte("from gridfs\n"))
	if err != nil {
		t.Fatal(err)
	}
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: 2}, {Key: "stdout", Value: file}})
	if r := denDB(t, db, "", "output", ids[1].Hex(), "--follow").must(t, ExitOK); r.stdout != "from gridfs\n" {
		t.Fatalf("follow of an ended task printed %q", r.stdout)
	}
}

// syncBuffer is a buffer the command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// den task add --after inserts tasks that wait (status -4) for the tasks
// not yet succeeded, marks those, and refuses tasks that do not exist or
// ended without succeeding, inserting nothing.
func TestTaskAddAfter(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{})
	pending, ok, failed := ids[0], ids[1], ids[2]
	setTask(t, db, ok, bson.D{{Key: "status", Value: 1}})
	setTask(t, db, failed, bson.D{{Key: "status", Value: 2}})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -2}}}})

	var out struct {
		IDs []string `json:"ids"`
	}
	denDB(t, db, "{}\n{}\n", "task", "add", "q", "--after", pending.Hex()+","+ok.Hex(), "--json").must(t, ExitOK).decode(t, &out)
	if len(out.IDs) != 2 {
		t.Fatalf("ids %v", out.IDs)
	}
	for _, hex := range out.IDs {
		id, _ := bson.ObjectIDFromHex(hex)
		raw := dentest.Task(t, db, id)
		w, _ := raw.Lookup("waiting").Array().Values()
		if st, _ := raw.Lookup("status").AsInt64OK(); st != -4 || len(w) != 1 || w[0].ObjectID() != pending {
			t.Fatalf("task after a pending and a succeeded one: %s", raw)
		}
	}
	if has, _ := dentest.Task(t, db, pending).Lookup("has_dependents").BooleanOK(); !has {
		t.Error("the pending task is not marked as having dependents")
	}
	// After only succeeded tasks: queued at once.
	denDB(t, db, "{}\n", "task", "add", "q", "--after", ok.Hex(), "--json").must(t, ExitOK).decode(t, &out)
	id, _ := bson.ObjectIDFromHex(out.IDs[0])
	if st, _ := dentest.Task(t, db, id).Lookup("status").AsInt64OK(); st != -2 {
		t.Fatalf("task after a succeeded one has status %d", st)
	}
	before := dentest.CountTasks(t, db, bson.D{})
	for _, after := range []string{failed.Hex(), bson.NewObjectID().Hex()} {
		r := denDB(t, db, "{}\n", "task", "add", "q", "--after", after).must(t, ExitError)
		if !strings.Contains(r.stderr, after) {
			t.Errorf("--after %s said %q", after, r.stderr)
		}
	}
	denDB(t, db, "{}\n", "task", "add", "q", "--after", "nope").must(t, ExitUsage)
	if n := dentest.CountTasks(t, db, bson.D{}); n != before {
		t.Errorf("%d tasks after refused adds, want %d", n, before)
	}
	denDB(t, db, "", "counts", "check").must(t, ExitOK)
}

// A queued task that no node can run as it requests: den task list marks
// it "(unfit)" (and --json gives the reason), den task show says why; a
// stale note on a finished task shows in neither.
func TestTaskUnfitShown(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}})
	waiting, done := ids[0], ids[1]
	why := "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus"
	setTask(t, db, waiting, bson.D{{Key: "unfit", Value: why}, {Key: "requested_resources", Value: bson.D{{Key: "memory_mb", Value: 5000}}}})
	setTask(t, db, done, bson.D{{Key: "unfit", Value: why}, {Key: "status", Value: 1}})

	out := denDB(t, db, "", "task", "list").must(t, ExitOK).stdout
	if strings.Count(out, "(unfit)") != 1 || !strings.Contains(out, "-2 queued (unfit)") {
		t.Errorf("task list:\n%s", out)
	}
	var rows []taskRow
	denDB(t, db, "", "task", "list", "--json").must(t, ExitOK).decode(t, &rows)
	for _, r := range rows {
		if want := map[string]string{waiting.Hex(): why}[r.ID]; r.Unfit != want {
			t.Errorf("task list --json: %s has unfit %q, want %q", r.ID, r.Unfit, want)
		}
	}
	if out := denDB(t, db, "", "task", "show", waiting.Hex()).must(t, ExitOK).stdout; !strings.Contains(out, "waits: "+why) {
		t.Errorf("task show of the waiting task:\n%s", out)
	}
	if out := denDB(t, db, "", "task", "show", done.Hex()).must(t, ExitOK).stdout; strings.Contains(out, "waits:") {
		t.Errorf("task show of the finished task:\n%s", out)
	}
}

// A manual retry records the run that ended in the task's history, as an
// automatic retry does, with its output: kept in the task document, it is
// copied to GridFS, so den output --attempt N prints every run's output
// after later runs replaced stdout and stderr. A task that never ran has
// no run to record.
func TestRetryKeepsEveryRunsOutput(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{})
	id, never := ids[0], ids[1]
	ended := func(stdout, stderr string, code int) {
		setTask(t, db, id, bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "stdout", Value: stdout}, {Key: "stderr", Value: stderr},
			{Key: "exit_code", Value: code}, {Key: "outcome", Value: "succeeded"}, {Key: "mtime", Value: time.Now()}})
	}
	output := func(want string, args ...string) {
		t.Helper()
		r := denDB(t, db, "", append([]string{"output", id.Hex()}, args...)...).must(t, ExitOK, args...)
		if r.stdout != want {
			t.Errorf("den output %v: %q, want %q", args, r.stdout, want)
		}
	}
	ended("first run\n", "first warning\n", 0)
	denDB(t, db, "", "task", "retry", id.Hex()).must(t, ExitOK)
	raw := dentest.Task(t, db, id)
	hist, _ := raw.Lookup("history").ArrayOK()
	vals, _ := hist.Values()
	if len(vals) != 1 {
		t.Fatalf("history after one manual retry: %s", hist)
	}
	entry := vals[0].Document()
	if by, _ := entry.Lookup("retried_by").StringValueOK(); by != "operator" || entry.Lookup("status").AsInt64() != 1 || entry.Lookup("node").StringValue() != "n1" ||
		entry.Lookup("exit_code").AsInt64() != 0 || entry.Lookup("outcome").StringValue() != "succeeded" {
		t.Errorf("history entry of the manually retried run: %s", entry)
	}
	if entry.Lookup("stdout").Type != bson.TypeObjectID || entry.Lookup("stderr").Type != bson.TypeObjectID {
		t.Errorf("the run's inline output is not in GridFS files: %s", entry)
	}
	// The new run replaces the task's output; both runs can be read.
	ended("second run\n", "", 0)
	output("first run\n", "--attempt", "1")
	output("first warning\n", "--attempt", "1", "--stderr")
	output("second run\n", "--attempt", "2")
	output("second run\n")
	// Retried again: the second run goes into history too, the first stays.
	denDB(t, db, "", "task", "retry", id.Hex()).must(t, ExitOK)
	ended("third run\n", "", 0)
	output("first run\n", "--attempt", "1")
	output("second run\n", "--attempt", "2")
	output("third run\n", "--attempt", "3")
	r := denDB(t, db, "", "output", id.Hex(), "--attempt", "4").must(t, ExitError)
	if !strings.Contains(r.stderr, "has had 3 runs") {
		t.Errorf("a run that does not exist: %q", r.stderr)
	}
	denDB(t, db, "", "output", id.Hex(), "--attempt", "1", "--follow").must(t, ExitUsage)
	show := denDB(t, db, "", "task", "show", id.Hex()).must(t, ExitOK)
	for _, want := range []string{"--attempt N", "  1: status 1 (", "retried by operator", "  3: this run"} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("den task show does not list the runs (%q):\n%s", want, show.stdout)
		}
	}
	// Cancelled while queued: it never ran, so nothing goes into history.
	setTask(t, db, never, bson.D{{Key: "status", Value: -5}, {Key: "cancel", Value: true}})
	denDB(t, db, "", "task", "retry", never.Hex()).must(t, ExitOK)
	if h := dentest.Task(t, db, never).Lookup("history"); h.Type != 0 {
		t.Errorf("a task that never ran got a history entry: %s", h)
	}
}
