package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A run's heartbeat writes runner.beat while the task is its own and not
// cancelled (LeaseHeld), and the task's LastSign is then that beat; once
// cancel is set it writes nothing and says LeaseCancelled; once the task
// is no longer that run's (another token, another node, ended, deleted),
// LeaseLost.
func TestRunnerBeatSaysWhetherItHoldsItsTask(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{})
	id, ended := ids[0], ids[1]
	start := time.Now().Truncate(time.Millisecond)
	token := startRun(t, db, store, id, "n", start)
	endedToken := startRun(t, db, store, ended, "n", start)
	if ok, err := store.Finish(ctx, ended, "n", endedToken, queue.Result{Status: queue.StatusSucceeded, Stdout: "", Stderr: ""}, start); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}

	if task := must(store.Task(ctx, id)); !task.Runner.LastSign().Equal(start) {
		t.Fatalf("before any beat, LastSign %v, want the run's start %v", task.Runner.LastSign(), start)
	}
	beat := start.Add(time.Minute)
	if lease, err := store.WriteBeat(ctx, id, "n", token, beat); err != nil || lease != queue.LeaseHeld {
		t.Fatalf("beat of the run that has the task: %v, %v; want LeaseHeld", lease, err)
	}
	if task := must(store.Task(ctx, id)); !task.Runner.Beat.Equal(beat) || !task.Runner.LastSign().Equal(beat) {
		t.Fatalf("after a beat, runner %+v, LastSign %v; want the beat %v", task.Runner, task.Runner.LastSign(), beat)
	}

	for _, c := range []struct {
		name  string
		id    bson.ObjectID
		node  string
		token bson.ObjectID
	}{
		{"another run", id, "n", bson.NewObjectID()},
		{"another node", id, "m", token},
		{"an ended task", ended, "n", endedToken},
		{"a deleted task", bson.NewObjectID(), "n", token},
	} {
		if lease, err := store.WriteBeat(ctx, c.id, c.node, c.token, beat.Add(time.Minute)); err != nil || lease != queue.LeaseLost {
			t.Errorf("beat of %s: %v, %v; want LeaseLost", c.name, lease, err)
		}
	}
	if task := must(store.Task(ctx, id)); !task.Runner.Beat.Equal(beat) {
		t.Fatalf("a beat without the task wrote runner.beat %v", task.Runner.Beat)
	}

	if got, err := store.SetCancel(ctx, id); err != nil || got != queue.CancelSet {
		t.Fatalf("cancel: %v %v", got, err)
	}
	if lease, err := store.WriteBeat(ctx, id, "n", token, beat.Add(time.Minute)); err != nil || lease != queue.LeaseCancelled {
		t.Fatalf("beat of a cancelled run: %v, %v; want LeaseCancelled", lease, err)
	}
	if task := must(store.Task(ctx, id)); !task.Runner.Beat.Equal(beat) {
		t.Fatalf("a cancelled run's beat wrote runner.beat %v", task.Runner.Beat)
	}
}

// LastSign is the run's beat, else its start (at), else its process's
// start: the last time the run was known alive.
func TestRunnerLastSign(t *testing.T) {
	t.Parallel()
	proc := time.UnixMilli(1_700_000_000_000)
	at, beat := proc.Add(time.Hour), proc.Add(2*time.Hour)
	for _, c := range []struct {
		name string
		r    queue.RunnerInfo
		want time.Time
	}{
		{"beat", queue.RunnerInfo{Started: proc.UnixMilli(), At: at, Beat: beat}, beat},
		{"no beat", queue.RunnerInfo{Started: proc.UnixMilli(), At: at}, at},
		{"neither beat nor at", queue.RunnerInfo{Started: proc.UnixMilli()}, proc},
	} {
		if got := c.r.LastSign(); !got.Equal(c.want) {
			t.Errorf("%s: LastSign %v, want %v", c.name, got, c.want)
		}
	}
}

// A result that does not fit in the task document fails the write with an
// error TooLarge recognizes (the runner then stores its output in GridFS),
// and the task is left running. The development server stores a document
// over 16 MiB (FerretDB on PostgreSQL sets no limit), so there the write
// succeeds and this is checked on MongoDB only.
func TestTooLargeResult(t *testing.T) {
	t.Parallel()
	if dentest.EmbeddedServer() {
		t.Skip("the development server stores a task document over 16 MiB: no write fails for being too large")
	}
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	token := startRun(t, db, store, id, "n", time.Now())

	huge := strings.Repeat("x", 16<<20+1)
	ok, err := store.Finish(ctx, id, "n", token, queue.Result{Status: queue.StatusSucceeded, Stdout: huge, Stderr: ""}, time.Now())
	if err == nil || ok {
		t.Fatalf("finish with 16 MiB of stdout: %v, %v; want an error", ok, err)
	}
	if !queue.TooLarge(err) || !queue.TooLarge(fmt.Errorf("record: %w", err)) {
		t.Errorf("TooLarge(%v) = false, want true", err)
	}
	if task := must(store.Task(ctx, id)); task.Status != queue.StatusRunning {
		t.Errorf("after a result too large, status %d, want still running", task.Status)
	}
}

// TooLarge recognizes the errors that say a document exceeds MongoDB's
// size limit, by their codes (those MongoDB answers an update or an
// insert with; the development server answers none), wrapped or not; no
// other error is one, those the server answers here included.
func TestTooLargeRecognizesSizeErrors(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, cancelErr := db.Collection("tasks").InsertOne(cancelled, bson.D{{Key: "stdout", Value: "x"}})
	_, dupErr := db.Collection("tasks").InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 1}}})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"an update's result over 16 MiB (17419)", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 17419, Message: "Resulting document after update is larger than 16777216"}}}, true},
		{"an invalid BSONObj size (10334)", mongo.CommandError{Code: 10334, Message: "BSONObj size: 16777300 (0x1000054) is invalid"}, true},
		{"an insert over the limit (17420)", mongo.CommandError{Code: 17420, Message: "Document to upsert is larger than 16777216"}, true},
		{"wrapped", fmt.Errorf("record the result: %w", mongo.CommandError{Code: 10334, Message: "BSONObj size is invalid"}), true},
		{"the driver's refusal to send one", fmt.Errorf("insert: %w", driver.ErrDocumentTooLarge), true},
		{"a text that only says so", errors.New("document too large"), false},
		{"no error", nil, false},
		{"a cancelled write", cancelErr, false},
		{"a duplicate key", dupErr, false},
		{"another server error", mongo.CommandError{Code: 11000, Message: "E11000 duplicate key error"}, false},
		{"another error", errors.New("connection reset"), false},
	} {
		if c.name != "no error" && c.err == nil {
			t.Fatalf("%s: no error to judge", c.name)
		}
		if got := queue.TooLarge(c.err); got != c.want {
			t.Errorf("%s: TooLarge(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
