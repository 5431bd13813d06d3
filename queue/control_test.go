package queue_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// startRun claims a task for node and starts a run of it, as a node and
// its runner do, and returns the run's token.
func startRun(t *testing.T, db *mongo.Database, store *queue.Store, id bson.ObjectID, node string, now time.Time) bson.ObjectID {
	t.Helper()
	dentest.Claim(t, db, id, node)
	run := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Started: now.UnixMilli(), Host: "h"}
	if _, ok, err := store.Start(dentest.Context(t), id, node, run, now); err != nil || !ok {
		t.Fatalf("start task %s: %v %v", id.Hex(), ok, err)
	}
	return run.Token
}

// A run that failed puts its task back in its queue, to start no earlier
// than it says, with the run in the task's history (History reads it back,
// oldest first) and its attempts (and timeouts, when it timed out)
// counted; the runner is gone. A run that no longer has the task (another
// token, another node) writes nothing.
func TestRunnerRetryRequeuesWithHistory(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	now := time.Now().Truncate(time.Millisecond)

	for i, timedOut := range []bool{true, false} {
		token := startRun(t, db, store, id, "n", now)
		entry := queue.HistoryEntry{Attempt: i + 1, Node: "n", Status: queue.StatusFailed, ExitCode: ptr(3 + i), TimedOut: timedOut,
			Outcome: queue.OutcomePlugin, Reason: "exit code", Started: now, Ended: now.Add(time.Second), Stdout: "out", Stderr: "err"}
		for _, other := range []struct {
			node  string
			token bson.ObjectID
		}{{"n", bson.NewObjectID()}, {"m", token}} {
			ok, err := store.Retry(ctx, id, other.node, other.token, entry, now.Add(time.Hour), now)
			if err != nil || ok {
				t.Fatalf("retry by a run that does not have the task (node %s): %v, %v; want false", other.node, ok, err)
			}
		}
		if task := must(store.Task(ctx, id)); task.Status != queue.StatusRunning || task.Attempts != i {
			t.Fatalf("a refused retry wrote: %v", task.Raw)
		}
		startAfter := now.Add(time.Duration(i+1) * time.Minute)
		ok, err := store.Retry(ctx, id, "n", token, entry, startAfter, now)
		if err != nil || !ok {
			t.Fatalf("retry %d: %v, %v", i+1, ok, err)
		}
		task, err := store.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != queue.StatusQueued || task.Node != "" || task.Runner != nil || !task.StartAfter.Equal(startAfter) ||
			task.Attempts != i+1 || task.Timeouts != 1 {
			t.Fatalf("after retry %d: status %d node %q runner %v start_after %v attempts %d timeouts %d; want -2, unclaimed, no runner, %v, %d, 1",
				i+1, task.Status, task.Node, task.Runner, task.StartAfter, task.Attempts, task.Timeouts, startAfter, i+1)
		}
		if n, ok := task.Raw.Lookup("node").AsInt64OK(); !ok || n != queue.Unclaimed {
			t.Fatalf("after retry %d: node %v, want %d", i+1, task.Raw.Lookup("node"), queue.Unclaimed)
		}
		hist, err := task.History()
		if err != nil || len(hist) != i+1 {
			t.Fatalf("history after retry %d: %v (%v), want %d entries", i+1, hist, err, i+1)
		}
		got := hist[i]
		if got.Attempt != i+1 || got.Node != "n" || got.Status != queue.StatusFailed || got.ExitCode == nil || *got.ExitCode != 3+i ||
			got.TimedOut != timedOut || got.Outcome != queue.OutcomePlugin || !got.Started.Equal(now) || !got.Ended.Equal(now.Add(time.Second)) ||
			got.Stdout != "out" || got.Stderr != "err" {
			t.Fatalf("history entry %d: %+v, want %+v", i+1, got, entry)
		}
		if i == 1 && !hist[0].TimedOut {
			t.Fatalf("history, oldest first: %+v", hist)
		}
	}
}

// History reads a task's history leniently where it may: none is no
// error; a history that is not an array, or an entry that is not a
// document or does not decode, is an error that names the entry.
func TestTaskHistoryOfOddDocuments(t *testing.T) {
	t.Parallel()
	entry := bson.D{{Key: "attempt", Value: 1}, {Key: "node", Value: "n"}, {Key: "status", Value: 2}, {Key: "ended", Value: time.Now()}}
	for _, c := range []struct {
		name    string
		history any // nil: no history field
		entries int
		err     string
	}{
		{"none", nil, 0, ""},
		{"empty", bson.A{}, 0, ""},
		{"two", bson.A{entry, entry}, 2, ""},
		{"not an array", "lots", 0, "history is "},
		{"an entry not a document", bson.A{entry, 7}, 1, "history entry 2 is "},
		{"an entry that does not decode", bson.A{bson.D{{Key: "attempt", Value: "first"}}}, 0, "history entry 1:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "status", Value: 2}}
			if c.history != nil {
				doc = append(doc, bson.E{Key: "history", Value: c.history})
			}
			task, err := queue.DecodeTask(mustRaw(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			hist, err := task.History()
			if len(hist) != c.entries {
				t.Errorf("History() = %d entries, want %d", len(hist), c.entries)
			}
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("History() error %v, want one containing %q", err, c.err)
			}
		})
	}
}

// A node cancels the task it claimed but whose runner has not started it:
// -5, with an empty stdout, a stderr and an outcome that say so. It cancels
// only its own claimed task: another node's, or a running one, stays.
func TestNodeCancelsUnstartedTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	mine, others, running, queued := ids[0], ids[1], ids[2], ids[3]
	now := time.Now().Truncate(time.Millisecond)
	dentest.Claim(t, db, mine, "n")
	dentest.Claim(t, db, others, "m")
	startRun(t, db, store, running, "n", now)

	for _, c := range []struct {
		name   string
		id     bson.ObjectID
		status int
	}{
		{"another node's", others, queue.StatusClaimed},
		{"running", running, queue.StatusRunning},
		{"queued", queued, queue.StatusQueued},
	} {
		ok, err := store.CancelUnstarted(ctx, c.id, "n", now)
		if err != nil || ok {
			t.Errorf("cancel %s task: %v, %v; want false", c.name, ok, err)
		}
		if raw := dentest.Task(t, db, c.id); raw.Lookup("status").AsInt64() != int64(c.status) {
			t.Errorf("%s task: status %v, want %d", c.name, raw.Lookup("status"), c.status)
		}
	}
	ok, err := store.CancelUnstarted(ctx, mine, "n", now)
	if err != nil || !ok {
		t.Fatalf("cancel its own claimed task: %v, %v", ok, err)
	}
	task, err := store.Task(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != queue.StatusCancelled || !task.Mtime.Equal(now) || task.Raw.Lookup("stdout").StringValue() != "" ||
		task.Raw.Lookup("stderr").StringValue() != "den: cancelled before it started\n" ||
		task.Raw.Lookup(queue.FieldOutcome).StringValue() != queue.OutcomeCancelled {
		t.Fatalf("cancelled task: %v", task.Raw)
	}
	if ok, err := store.CancelUnstarted(ctx, mine, "n", now); err != nil || ok {
		t.Errorf("cancel it again: %v, %v; want false", ok, err)
	}
}

// A node records that it cancelled a running task whose runner it had to
// kill: -5, the output there is kept, the outcome says why. Only that very
// run's task is cancelled: a stale token or another node writes nothing.
func TestNodeCancelsRunningTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	now := time.Now().Truncate(time.Millisecond)
	token := startRun(t, db, store, id, "n", now)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "stdout", Value: "half"}, {Key: queue.FieldLive, Value: bson.D{{Key: "token", Value: token}}}}}})

	for _, c := range []struct {
		node  string
		token bson.ObjectID
	}{{"n", bson.NewObjectID()}, {"m", token}} {
		if ok, err := store.CancelRunning(ctx, id, c.node, c.token, now); err != nil || ok {
			t.Errorf("cancel by node %s with token %s: %v, %v; want false", c.node, c.token.Hex(), ok, err)
		}
	}
	if raw := dentest.Task(t, db, id); raw.Lookup("status").AsInt64() != queue.StatusRunning {
		t.Fatalf("a refused cancel wrote: %v", raw)
	}
	ok, err := store.CancelRunning(ctx, id, "n", token, now.Add(time.Second))
	if err != nil || !ok {
		t.Fatalf("cancel the run: %v, %v", ok, err)
	}
	raw := dentest.Task(t, db, id)
	if raw.Lookup("status").AsInt64() != queue.StatusCancelled || raw.Lookup("stdout").StringValue() != "half" ||
		raw.Lookup(queue.FieldOutcome).StringValue() != queue.OutcomeCancelled ||
		!strings.Contains(raw.Lookup(queue.FieldOutcomeReason).StringValue(), "killed") ||
		raw.Lookup(queue.FieldLive).Type != 0 || !raw.Lookup("mtime").Time().Equal(now.Add(time.Second)) {
		t.Fatalf("cancelled run's task: %v", raw)
	}
	if ok, err := store.CancelRunning(ctx, id, "n", token, now); err != nil || ok {
		t.Errorf("cancel it again: %v, %v; want false", ok, err)
	}
}

// An operator's cancel sets cancel: true on a task that has not ended
// (queued, blocked, claimed, running), and leaves an ended one alone
// (CancelFinished), as it does a task there is not (CancelNoTask).
func TestOperatorSetCancel(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	for _, c := range []struct {
		status int
		want   queue.CancelOutcome
	}{
		{queue.StatusQueued, queue.CancelSet},
		{queue.StatusBlocked, queue.CancelSet},
		{queue.StatusClaimed, queue.CancelSet},
		{queue.StatusRunning, queue.CancelSet},
		{queue.StatusSucceeded, queue.CancelFinished},
		{queue.StatusFailed, queue.CancelFinished},
		{queue.StatusCancelled, queue.CancelFinished},
		{queue.StatusOrphaned, queue.CancelFinished},
	} {
		id := dentest.TaskWith(t, db, qid, bson.D{})
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: c.status}}}})
		got, err := store.SetCancel(ctx, id)
		if err != nil || got != c.want {
			t.Errorf("cancel a task of status %d: %v, %v; want %v", c.status, got, err, c.want)
		}
		task, err := store.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Cancel != (c.want == queue.CancelSet) || task.Status != c.status {
			t.Errorf("task of status %d after the cancel: cancel %v, status %d", c.status, task.Cancel, task.Status)
		}
	}
	if got, err := store.SetCancel(ctx, bson.NewObjectID()); err != nil || got != queue.CancelNoTask {
		t.Errorf("cancel a task there is not: %v, %v; want CancelNoTask", got, err)
	}
}
