package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// setup makes a queue with one task claimed by node "n", and an Executor for
// it using plugin p.
type setup struct {
	db       *mongo.Database
	queue    bson.ObjectID
	task     bson.ObjectID
	executor *worker.Executor
	logs     *observer.ObservedLogs
}

func newSetup(t *testing.T, p plugins.Plugin, gfs string, params bson.D) setup {
	t.Helper()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", "Test::P", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, params)
	dentest.Claim(t, db, ids[0], "n")
	reg := &plugins.Registry{}
	if p != nil {
		reg.Register("Test::P", p)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	return setup{db: db, queue: qid, task: ids[0], logs: logs, executor: &worker.Executor{
		Spec: runner.Spec{Node: "n", Task: ids[0].Hex(), Plugin: "Test::P", GFS: gfs},
		DB:   db, Plugins: reg, Log: log,
	}}
}

// output returns a task's stdout or stderr, reading GridFS when the field
// holds a file id.
func output(t *testing.T, db *mongo.Database, raw bson.Raw, field string) (string, bool) {
	t.Helper()
	v := raw.Lookup(field)
	if id, ok := v.ObjectIDOK(); ok {
		b, err := gridfs.NewBucket(db, "tasks").ReadFile(dentest.Context(t), id)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), true
	}
	return v.StringValue(), false
}

func status(raw bson.Raw) int64 {
	s, _ := raw.Lookup("status").AsInt64OK()
	return s
}

func write(stdout, stderr string, st int, err error) plugins.Func {
	return func(_ context.Context, _ *queue.Task, env plugins.Env) (int, error) {
		io.WriteString(env.Stdout, stdout)
		io.WriteString(env.Stderr, stderr)
		return st, err
	}
}

func TestResultValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		plugin     plugins.Plugin
		params     bson.D
		status     int64
		stderrHas  string
		stdoutWant string
	}{
		{"success", write("out", "", 1, nil), bson.D{}, 1, "", "out"},
		{"failure", write("", "bad", 2, nil), bson.D{}, 2, "bad", ""},
		{"custom positive status", write("", "", 7, nil), bson.D{}, 7, "", ""},
		{"zero status", write("x", "", 0, nil), bson.D{}, 2, "must be a positive integer", "x"},
		{"negative status", write("", "", -3, nil), bson.D{}, 2, "returned status -3", ""},
		{"error", write("", "partial", 1, errors.New("disk on fire")), bson.D{}, 2, "partial\nden: plugin returned an error: disk on fire", ""},
		{"panic", plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) { panic("boom") }), bson.D{}, 2, "panicked: boom", ""},
		{"no such plugin", nil, bson.D{}, 2, `no plugin "Test::P" is registered`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, tc.plugin, "auto", tc.params)
			if err := s.executor.Run(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			raw := dentest.Task(t, s.db, s.task)
			if status(raw) != tc.status {
				t.Errorf("status %d, want %d", status(raw), tc.status)
			}
			stderr, _ := output(t, s.db, raw, "stderr")
			if !strings.Contains(stderr, tc.stderrHas) {
				t.Errorf("stderr %q lacks %q", stderr, tc.stderrHas)
			}
			if tc.name == "panic" && !strings.Contains(stderr, "goroutine") {
				t.Errorf("stderr of a panic has no stack: %q", stderr)
			}
			if stdout, _ := output(t, s.db, raw, "stdout"); stdout != tc.stdoutWant {
				t.Errorf("stdout %q, want %q", stdout, tc.stdoutWant)
			}
			if _, ok := raw.Lookup("mtime").TimeOK(); !ok {
				t.Error("mtime not a date")
			}
		})
	}
}

func TestMalformedTaskIsFailedNotRun(t *testing.T) {
	t.Parallel()
	ran := false
	s := newSetup(t, plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) { ran = true; return 1, nil }), "auto", nil)
	ctx := dentest.Context(t)
	dentest.Update(t, s.db.Collection("tasks"), bson.D{{Key: "_id", Value: s.task}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "parameters", Value: ""}}}})
	if err := s.executor.Run(ctx); err != nil {
		t.Fatal(err)
	}
	raw := dentest.Task(t, s.db, s.task)
	stderr, _ := output(t, s.db, raw, "stderr")
	if ran || status(raw) != 2 || !strings.Contains(stderr, "parameters is missing") {
		t.Fatalf("ran=%v status=%d stderr=%q", ran, status(raw), stderr)
	}
}

// The gfs setting decides where output goes; count_todo goes down by one.
func TestOutputStorage(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", worker.InlineLimit/2+1) // two of these do not fit inline
	cases := []struct {
		name           string
		gfs            string
		stdout, stderr string
		wantFiles      bool
	}{
		{"auto small", "auto", "out", "err", false},
		{"auto too big together", "auto", big, big, true},
		{"auto invalid utf-8", "auto", "bad \xff byte", "", true},
		{"false small", "false", "out", "err", false},
		{"true small", "true", "out", "err", true},
		{"true empty", "true", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, write(tc.stdout, tc.stderr, 1, nil), tc.gfs, bson.D{})
			dentest.Update(t, s.db.Collection("queues"), bson.D{{Key: "_id", Value: s.queue}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: 5}}}})
			if err := s.executor.Run(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			raw := dentest.Task(t, s.db, s.task)
			out, outFile := output(t, s.db, raw, "stdout")
			errOut, errFile := output(t, s.db, raw, "stderr")
			if out != tc.stdout || errOut != tc.stderr {
				t.Fatalf("stored output differs (stdout %d bytes, stderr %d bytes)", len(out), len(errOut))
			}
			if outFile != tc.wantFiles || errFile != tc.wantFiles {
				t.Fatalf("in GridFS: stdout %v stderr %v, want %v", outFile, errFile, tc.wantFiles)
			}
			if tc.wantFiles {
				files, err := gridfs.NewBucket(s.db, "tasks").Find(dentest.Context(t), s.task)
				if err != nil || len(files) != 2 {
					t.Fatalf("files with metadata.task_id: %d, %v", len(files), err)
				}
			}
			q, err := s.db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: s.queue}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := q.Lookup("count_todo").AsInt64OK(); n != 4 {
				t.Fatalf("count_todo %d, want 4", n)
			}
		})
	}
}

// A task that is no longer claimed by the node is not run.
func TestDoesNotRunATaskNoLongerClaimed(t *testing.T) {
	t.Parallel()
	ran := false
	s := newSetup(t, plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) { ran = true; return 1, nil }), "auto", bson.D{})
	dentest.Update(t, s.db.Collection("tasks"), bson.D{{Key: "_id", Value: s.task}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -6}}}})
	if err := s.executor.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	if ran || status(dentest.Task(t, s.db, s.task)) != -6 {
		t.Fatal("runner ran or changed a task that was not its own")
	}
}

// When the task is reaped while it runs, the runner does not overwrite the
// new state, keeps the output in GridFS under metadata.task_id, and says so.
func TestTaskChangedWhileRunning(t *testing.T) {
	t.Parallel()
	var db *mongo.Database
	var taskID bson.ObjectID
	p := plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		io.WriteString(env.Stdout, "work done before the reaping\n")
		_, err := db.Collection("tasks").UpdateOne(ctx, bson.D{{Key: "_id", Value: taskID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: -6}}}})
		return 1, err
	})
	s := newSetup(t, p, "auto", bson.D{})
	db, taskID = s.db, s.task
	if err := s.executor.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	raw := dentest.Task(t, s.db, s.task)
	if status(raw) != -6 || raw.Lookup("stdout").Type != bson.TypeNull {
		t.Fatalf("task was overwritten: %s", raw)
	}
	files, err := gridfs.NewBucket(s.db, "tasks").Find(dentest.Context(t), s.task)
	if err != nil || len(files) != 2 {
		t.Fatalf("want stdout and stderr files, got %d (%v)", len(files), err)
	}
	var stdout []byte
	for _, f := range files {
		if f.Filename == "stdout" {
			if stdout, err = gridfs.NewBucket(s.db, "tasks").ReadFile(dentest.Context(t), f.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(stdout, []byte("work done before the reaping\n")) {
		t.Fatalf("stdout kept: %q", stdout)
	}
	if s.logs.FilterMessageSnippet("task changed while it ran").Len() != 1 {
		t.Fatalf("no log line about the conflict: %v", s.logs.All())
	}
}

// Output far beyond the inline limit streams into GridFS as it is written.
func TestLargeOutputStreams(t *testing.T) {
	t.Parallel()
	line := []byte(strings.Repeat("é", 500) + "\n")
	const lines = 20000 // ~20 MB
	p := plugins.Func(func(ctx context.Context, _ *queue.Task, env plugins.Env) (int, error) {
		for range lines {
			if _, err := env.Stdout.Write(line); err != nil {
				return 2, err
			}
		}
		return 1, nil
	})
	s := newSetup(t, p, "auto", bson.D{})
	start := time.Now()
	if err := s.executor.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("stored %d MB in %s", len(line)*lines>>20, time.Since(start))
	raw := dentest.Task(t, s.db, s.task)
	out, inFile := output(t, s.db, raw, "stdout")
	if !inFile || len(out) != len(line)*lines {
		t.Fatalf("stdout in GridFS %v, %d bytes", inFile, len(out))
	}
}

// A node cut off long enough to be declared dead comes back: its task was
// rescued and claimed again (same node name, new run). The old runner's
// result must not overwrite the new run; its output is kept in GridFS.
func TestStaleRunnerDoesNotOverwriteANewRun(t *testing.T) {
	t.Parallel()
	var db *mongo.Database
	var taskID bson.ObjectID
	newToken := bson.NewObjectID()
	p := plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		io.WriteString(env.Stdout, "late result\n")
		_, err := db.Collection("tasks").UpdateOne(ctx, bson.D{{Key: "_id", Value: taskID}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "runner.token", Value: newToken}, {Key: "attempts", Value: 1}}}})
		return 1, err
	})
	s := newSetup(t, p, "auto", bson.D{})
	db, taskID = s.db, s.task
	if err := s.executor.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	raw := dentest.Task(t, s.db, s.task)
	if status(raw) != 0 || raw.Lookup("runner", "token").ObjectID() != newToken {
		t.Fatalf("the new run was overwritten: %s", raw)
	}
	files, err := gridfs.NewBucket(s.db, "tasks").Find(dentest.Context(t), s.task)
	if err != nil || len(files) != 2 {
		t.Fatalf("output not kept in GridFS: %d files (%v)", len(files), err)
	}
	if s.logs.FilterMessageSnippet("task changed while it ran").Len() != 1 {
		t.Fatal("conflict not logged")
	}
}

// A plugin's Record stores its fields with the result, the last value of a
// field winning; reserved and malformed names are refused with an error and
// leave the task as den writes it. Config hands the plugin its section of
// the node configuration.
func TestPluginRecordsAndConfig(t *testing.T) {
	t.Parallel()
	var refused []string
	p := plugins.Func(func(_ context.Context, _ *queue.Task, env plugins.Env) (int, error) {
		var cfg struct {
			Greeting string `json:"greeting"`
		}
		if err := env.Config(&cfg); err != nil {
			return plugins.StatusFailed, err
		}
		io.WriteString(env.Stdout, cfg.Greeting)
		for _, f := range []string{"status", "stdout", "node", "timed_out", worker.FieldLeftovers, queue.FieldAttempts, "", "$set", "a.b"} {
			if err := env.Record(f, "plugin value"); err != nil {
				refused = append(refused, f)
				io.WriteString(env.Stderr, err.Error()+"\n")
			}
		}
		if err := env.Record("unstorable", make(chan int)); err != nil {
			refused = append(refused, "unstorable")
		}
		for _, v := range []int{5, 6} {
			if err := env.Record("mine", v); err != nil {
				return plugins.StatusFailed, err
			}
		}
		return plugins.StatusSucceeded, nil
	})
	s := newSetup(t, p, "false", bson.D{})
	s.executor.Spec.PluginConfig = []byte(`{"greeting": "hello from the config"}`)
	if err := s.executor.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	raw := dentest.Task(t, s.db, s.task)
	if status(raw) != 1 || raw.Lookup("node").StringValue() != "n" {
		t.Errorf("status %d node %s: a refused Record changed the task", status(raw), raw.Lookup("node"))
	}
	if len(refused) != 10 {
		t.Errorf("refused %q, want all 9 reserved or malformed names and the unstorable value", refused)
	}
	if stdout, _ := output(t, s.db, raw, "stdout"); stdout != "hello from the config" {
		t.Errorf("stdout %q: the plugin did not get its configuration section", stdout)
	}
	if n, _ := raw.Lookup("mine").AsInt64OK(); n != 6 {
		t.Errorf("mine = %v, want 6 (the last value recorded)", raw.Lookup("mine"))
	}
	for _, f := range []string{"timed_out", worker.FieldLeftovers, queue.FieldAttempts, "a", "$set", "unstorable"} {
		if _, err := raw.LookupErr(f); err == nil {
			t.Errorf("task has %s after the plugin's refused Record", f)
		}
	}
}

// A refusal (plugins.Refuse) ends the task at once: failed, outcome
// refused, never retried whatever its max_retries; a plain error with
// retries left puts it back.
func TestRefusedIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		status  int64
		outcome string
	}{
		{"refused", plugins.Refuse(errors.New("command refused: /bin/sh is not allowed on this node")), queue.StatusFailed, queue.OutcomeRefused},
		{"a plain error", errors.New("disk on fire"), queue.StatusQueued, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runs := 0
			s := newSetup(t, plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) {
				runs++
				return queue.StatusFailed, tc.err
			}), "auto", bson.D{})
			dentest.Update(t, s.db.Collection("tasks"), bson.D{{Key: "_id", Value: s.task}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 2}, {Key: "retry_delay", Value: 0}}}})
			if err := s.executor.Run(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			raw := dentest.Task(t, s.db, s.task)
			outcome, _ := raw.Lookup("outcome").StringValueOK()
			reason, _ := raw.Lookup("outcome_reason").StringValueOK()
			if runs != 1 || status(raw) != tc.status || outcome != tc.outcome {
				t.Fatalf("ran %d times, status %d, outcome %q (%q); want once, status %d, outcome %q", runs, status(raw), outcome, reason, tc.status, tc.outcome)
			}
			if tc.outcome == queue.OutcomeRefused && !strings.Contains(reason, "not allowed on this node") {
				t.Errorf("outcome_reason %q does not say why", reason)
			}
		})
	}
}
