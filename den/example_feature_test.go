package den_test

// Examples of what a user of den sees when they feed it documents, as
// docs/documents.md, docs/schedules.md and docs/task-control.md describe
// them: each inserts documents with the mongo driver, runs a node as
// Example does, and prints what the documents say once the node acted.

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// The plugins of the examples below, beside Example's upperPlugin.
const (
	// failPlugin's tasks always fail, saying so on stderr.
	failPlugin = "Example::Plugin::Fail"
	// waitPlugin's tasks run until they are stopped.
	waitPlugin = "Example::Plugin::Wait"
)

func init() {
	plugins.Register(failPlugin, plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		fmt.Fprintln(env.Stderr, "no such file: input.csv")
		return plugins.StatusFailed, nil
	}))
	plugins.Register(waitPlugin, plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		fmt.Fprintln(env.Stdout, "started")
		<-ctx.Done()
		return plugins.StatusFailed, ctx.Err()
	}))
}

// exampleNode runs a den node named name on db, as Example does, until
// stop is called.
func exampleNode(db *mongo.Database, name string) (stop func()) {
	dir, err := os.MkdirTemp("", "den-example-")
	if err != nil {
		log.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cfg := den.Config{
		Name:     name,
		URI:      dentest.URI(),
		Database: db.Name(),
		Interval: 100 * time.Millisecond,
		Runner: den.RunnerCommand{
			Path:     exe,
			Env:      []string{dentest.EnvRole + "=task-runner"},
			Log:      filepath.Join(dir, "runners.log"),
			MaxTasks: 1,
		},
		DrainOnStop: time.Minute,
	}
	node, err := den.New(cfg, db, plugins.Default(), zap.NewNop(), nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

// insertQueue inserts a queue document as docs/documents.md shows it,
// with fields of one's own (retention, ...) after.
func insertQueue(db *mongo.Database, name, plugin string, fields ...bson.E) bson.ObjectID {
	doc := bson.D{{Key: "name", Value: name}, {Key: "constructor", Value: plugin},
		{Key: "maxthreads", Value: 1}, {Key: "sort", Value: "fifo"},
		{Key: "count_todo", Value: 0}, {Key: "count_total", Value: 0}}
	res, err := db.Collection("queues").InsertOne(context.Background(), append(doc, fields...))
	if err != nil {
		log.Fatal(err)
	}
	return res.InsertedID.(bson.ObjectID)
}

// insertTask inserts a queued task of queue q whose text parameter is
// text, as docs/documents.md shows it, with the fields given (which may
// replace status, node or mtime), and counts it in the queue.
func insertTask(db *mongo.Database, q bson.ObjectID, text string, fields ...bson.E) bson.ObjectID {
	ctx := context.Background()
	now := time.Now()
	doc := bson.D{{Key: "queue", Value: q}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: -1},
		{Key: "parameters", Value: bson.D{{Key: "text", Value: text}}},
		{Key: "ctime", Value: now}, {Key: "mtime", Value: now},
		{Key: "stdout", Value: nil}, {Key: "stderr", Value: nil}}
	todo := 1
outer:
	for _, f := range fields {
		if n, ok := f.Value.(int); ok && f.Key == "status" && n > 0 {
			todo = 0 // an ended task is no longer to do
		}
		for i := range doc {
			if doc[i].Key == f.Key {
				doc[i] = f
				continue outer
			}
		}
		doc = append(doc, f)
	}
	res, err := db.Collection("tasks").InsertOne(ctx, doc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: q}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count_total", Value: 1}, {Key: "count_todo", Value: todo}}}}); err != nil {
		log.Fatal(err)
	}
	return res.InsertedID.(bson.ObjectID)
}

// waitTask waits until the task matching filter is as done says, and
// returns it; the test binary's deadline catches a hang, it does not
// measure speed.
func waitTask(db *mongo.Database, filter bson.D, done func(queue.Task) bool) queue.Task {
	ctx := context.Background()
	var t queue.Task
	if !dentest.Until(50*time.Millisecond, func() bool {
		raw, err := db.Collection("tasks").FindOne(ctx, filter).Raw()
		if err == mongo.ErrNoDocuments {
			return false
		}
		if err != nil {
			log.Fatal(err)
		}
		if t, err = queue.DecodeTask(raw); err != nil {
			log.Fatal(err)
		}
		return done(t)
	}) {
		log.Fatalf("no task %v as waited for at the test binary's deadline", filter)
	}
	return t
}

// ended says a task has ended: finished, cancelled or orphaned.
func ended(t queue.Task) bool { return t.StatusOK && queue.Ended(t.Status) }

// byID is the filter of the task with _id id.
func byID(id bson.ObjectID) bson.D { return bson.D{{Key: "_id", Value: id}} }

// output is a stream of an ended task, its last line alone.
func output(t queue.Task, stream string) string {
	text, _, err := t.Output(stream)
	if err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return lines[len(lines)-1]
}

// A schedule inserts a task into its queue at the times it names (here
// every second); each such task is an ordinary task with one more field,
// schedule (docs/schedules.md).
func Example_schedule() {
	db, drop := dentest.ExampleDB("Example_schedule")
	defer drop()
	q := insertQueue(db, "reports", upperPlugin)
	if _, err := db.Collection("schedules").InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: "report-every-second"}, {Key: "queue", Value: q},
		{Key: "parameters", Value: bson.D{{Key: "text", Value: "daily report"}}},
		{Key: "every", Value: 1},
	}); err != nil {
		log.Fatal(err)
	}
	stop := exampleNode(db, "example-node")
	task := waitTask(db, bson.D{{Key: "schedule", Value: "report-every-second"}}, ended)
	stop()
	schedule, _ := task.Raw.Lookup("schedule").StringValueOK()
	fmt.Printf("a task of schedule %s: %s\n", schedule, queue.StatusName(task.Status))
	fmt.Println("stdout:", output(task, queue.StreamStdout))
	// Output:
	// a task of schedule report-every-second: succeeded
	// stdout: DAILY REPORT
}

// A task inserted blocked (-4) with after waits until every task it comes
// after succeeded, then runs (docs/task-control.md, Dependencies).
func Example_dependencies() {
	db, drop := dentest.ExampleDB("Example_dependencies")
	defer drop()
	q := insertQueue(db, "build", upperPlugin)
	first := insertTask(db, q, "compile")
	second := insertTask(db, q, "link", bson.E{Key: "status", Value: queue.StatusBlocked},
		bson.E{Key: "after", Value: bson.A{first}})
	stop := exampleNode(db, "example-node")
	b := waitTask(db, byID(second), ended)
	a := waitTask(db, byID(first), ended)
	stop()
	fmt.Println("first:", queue.StatusName(a.Status), output(a, queue.StreamStdout))
	fmt.Println("second:", queue.StatusName(b.Status), output(b, queue.StreamStdout))
	fmt.Println("second ended after first:", !b.Mtime.Before(a.Mtime))
	// Output:
	// first: succeeded COMPILE
	// second: succeeded LINK
	// second ended after first: true
}

// When a task that others come after fails, they never run: they are
// cancelled, with the reason (docs/task-control.md, Dependencies).
func Example_dependencyFailed() {
	db, drop := dentest.ExampleDB("Example_dependencyFailed")
	defer drop()
	q := insertQueue(db, "import", failPlugin)
	first := insertTask(db, q, "fetch")
	second := insertTask(db, q, "load", bson.E{Key: "status", Value: queue.StatusBlocked},
		bson.E{Key: "after", Value: bson.A{first}})
	stop := exampleNode(db, "example-node")
	b := waitTask(db, byID(second), ended)
	a := waitTask(db, byID(first), ended)
	stop()
	fmt.Println("first:", queue.StatusName(a.Status))
	fmt.Println("second:", queue.StatusName(b.Status))
	// Output:
	// first: failed
	// second: cancelled
}

// Setting cancel: true on a running task makes its node stop the run; the
// task ends cancelled (-5). A queued task so marked never starts
// (docs/task-control.md).
func Example_cancel() {
	db, drop := dentest.ExampleDB("Example_cancel")
	defer drop()
	q := insertQueue(db, "crawl", waitPlugin)
	id := insertTask(db, q, "the whole web")
	stop := exampleNode(db, "example-node")
	waitTask(db, byID(id), func(t queue.Task) bool { return t.Status == queue.StatusRunning })
	if _, err := db.Collection("tasks").UpdateOne(context.Background(),
		bson.D{{Key: "_id", Value: id}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-4, -3, -2, -1, 0}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: true}}}}); err != nil {
		log.Fatal(err)
	}
	task := waitTask(db, byID(id), ended)
	stop()
	outcome, _ := task.Raw.Lookup(queue.FieldOutcome).StringValueOK()
	fmt.Printf("status %d (%s), outcome %s\n", task.Status, queue.StatusName(task.Status), outcome)
	// Output:
	// status -5 (cancelled), outcome cancelled
}

// A run that fails is retried while the task has retries left
// (max_retries); each retried run goes into the task's history
// (docs/task-control.md).
func Example_retries() {
	db, drop := dentest.ExampleDB("Example_retries")
	defer drop()
	q := insertQueue(db, "import", failPlugin)
	id := insertTask(db, q, "input.csv", bson.E{Key: "max_retries", Value: 2}, bson.E{Key: "retry_delay", Value: 0})
	stop := exampleNode(db, "example-node")
	task := waitTask(db, byID(id), ended)
	stop()
	fmt.Printf("status %d (%s) after %d retries\n", task.Status, queue.StatusName(task.Status), task.Attempts)
	history, _ := task.Raw.Lookup("history").ArrayOK()
	runs, _ := history.Values()
	for _, run := range runs {
		r := run.Document()
		fmt.Printf("run %d: status %d\n", r.Lookup("attempt").AsInt64(), r.Lookup("status").AsInt64())
	}
	fmt.Println("stderr:", output(task, queue.StreamStderr))
	// Output:
	// status 2 (failed) after 2 retries
	// run 1: status 2
	// run 2: status 2
	// stderr: no such file: input.csv
}

// A run that takes longer than the task's timeout (seconds) is stopped,
// and the task fails with timed_out: true (docs/task-control.md).
func Example_timeout() {
	db, drop := dentest.ExampleDB("Example_timeout")
	defer drop()
	q := insertQueue(db, "crawl", waitPlugin)
	id := insertTask(db, q, "the whole web", bson.E{Key: "timeout", Value: 1})
	stop := exampleNode(db, "example-node")
	task := waitTask(db, byID(id), ended)
	stop()
	timedOut, _ := task.Raw.Lookup("timed_out").BooleanOK()
	outcome, _ := task.Raw.Lookup(queue.FieldOutcome).StringValueOK()
	fmt.Printf("status %d (%s), timed_out %v, outcome %s\n", task.Status, queue.StatusName(task.Status), timedOut, outcome)
	fmt.Println("stdout:", output(task, queue.StreamStdout))
	// Output:
	// status 2 (failed), timed_out true, outcome timeout
	// stdout: started
}

// A task whose deadline (end_before) passed before it started never
// starts: it fails with expired: true (docs/task-control.md).
func Example_endBefore() {
	db, drop := dentest.ExampleDB("Example_endBefore")
	defer drop()
	q := insertQueue(db, "reports", upperPlugin)
	id := insertTask(db, q, "yesterday's report", bson.E{Key: "end_before", Value: time.Now().Add(-time.Hour)})
	stop := exampleNode(db, "example-node")
	task := waitTask(db, byID(id), ended)
	stop()
	expired, _ := task.Raw.Lookup("expired").BooleanOK()
	outcome, _ := task.Raw.Lookup(queue.FieldOutcome).StringValueOK()
	fmt.Printf("status %d (%s), expired %v, outcome %s\n", task.Status, queue.StatusName(task.Status), expired, outcome)
	// Output:
	// status 2 (failed), expired true, outcome expired
}

// A task with a field den cannot read is never run: it fails with the
// reason in its stderr, and the node goes on (docs/documents.md).
func Example_malformedTask() {
	db, drop := dentest.ExampleDB("Example_malformedTask")
	defer drop()
	q := insertQueue(db, "reports", upperPlugin)
	bad := insertTask(db, q, "soon, please", bson.E{Key: "timeout", Value: "soon"})
	good := insertTask(db, q, "now")
	stop := exampleNode(db, "example-node")
	b := waitTask(db, byID(bad), ended)
	g := waitTask(db, byID(good), ended)
	stop()
	fmt.Println("bad:", queue.StatusName(b.Status))
	fmt.Println("stderr:", output(b, queue.StreamStderr))
	fmt.Println("good:", queue.StatusName(g.Status), output(g, queue.StreamStdout))
	// Output:
	// bad: failed
	// stderr: den: task not run: timeout is "soon" (string); want a number of seconds or a duration such as "90s"
	// good: succeeded NOW
}

// A queue's retention field says how long its ended tasks stay after
// they ended (mtime); the nodes then remove them (docs/cli.md, Automatic
// retention).
func Example_retention() {
	db, drop := dentest.ExampleDB("Example_retention")
	defer drop()
	q := insertQueue(db, "resize", upperPlugin,
		bson.E{Key: "retention", Value: bson.D{{Key: "succeeded", Value: "1h"}}})
	// A task made a week ago (its _id says when, as every ObjectId does)
	// that ended then.
	weekAgo := time.Now().Add(-7 * 24 * time.Hour)
	old := insertTask(db, q, "last week", bson.E{Key: "_id", Value: bson.NewObjectIDFromTimestamp(weekAgo)},
		bson.E{Key: "status", Value: queue.StatusSucceeded}, bson.E{Key: "node", Value: "old-node"},
		bson.E{Key: "ctime", Value: weekAgo}, bson.E{Key: "mtime", Value: weekAgo})
	recent := insertTask(db, q, "just now", bson.E{Key: "status", Value: queue.StatusSucceeded},
		bson.E{Key: "node", Value: "old-node"})
	stop := exampleNode(db, "example-node")
	ctx := context.Background()
	tasks := db.Collection("tasks")
	if !dentest.Until(50*time.Millisecond, func() bool {
		n, err := tasks.CountDocuments(ctx, byID(old))
		if err != nil {
			log.Fatal(err)
		}
		return n == 0
	}) {
		log.Fatal("the old task is still there at the test binary's deadline")
	}
	stop()
	n, err := tasks.CountDocuments(ctx, byID(recent))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ended a week ago: removed")
	fmt.Println("ended just now, kept:", n == 1)
	// Output:
	// ended a week ago: removed
	// ended just now, kept: true
}

// A task's priority (an integer, default 0, may be negative) makes den
// nodes claim it before every task of lower priority, whenever it was
// inserted; within one priority, in the queue's order (docs/task-control.md,
// Priorities).
func Example_priority() {
	db, drop := dentest.ExampleDB("Example_priority")
	defer drop()
	q := insertQueue(db, "reports", upperPlugin) // fifo, one at a time
	ids := []bson.ObjectID{
		insertTask(db, q, "first in"),
		insertTask(db, q, "whenever", bson.E{Key: "priority", Value: -1}),
		insertTask(db, q, "second in"),
		insertTask(db, q, "urgent", bson.E{Key: "priority", Value: 10}),
	}
	stop := exampleNode(db, "example-node")
	var done []queue.Task
	for _, id := range ids {
		done = append(done, waitTask(db, byID(id), ended))
	}
	stop()
	slices.SortFunc(done, func(a, b queue.Task) int { return a.Mtime.Compare(b.Mtime) })
	for _, t := range done {
		fmt.Println(output(t, queue.StreamStdout))
	}
	// Output:
	// URGENT
	// FIRST IN
	// SECOND IN
	// WHENEVER
}
