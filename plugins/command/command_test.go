package command_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

func TestMain(m *testing.M) { dentest.Main(m, nil) }

// runTask runs one command task through a real runner and returns the task
// document.
func runTask(t *testing.T, policy command.Policy, params bson.D, extra ...bson.E) bson.Raw {
	t.Helper()
	raw, _ := runTaskIn(t, dentest.DB(t), policy, params, extra...)
	return raw
}

func runTaskIn(t *testing.T, db *mongo.Database, policy command.Policy, params bson.D, extra ...bson.E) (bson.Raw, *mongo.Database) {
	t.Helper()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	id := dentest.Tasks(t, db, qid, params)[0]
	dentest.Claim(t, db, id, "n", extra...)
	cfg, _ := json.Marshal(policy)
	r := &worker.Executor{
		Spec: runner.Spec{Node: "n", Task: id.Hex(), Plugin: command.Name, GFS: "auto", PluginConfig: cfg},
		DB:   db, Plugins: plugins.Default(), Log: zaptest.NewLogger(t),
	}
	if err := r.Run(dentest.Context(t)); err != nil {
		t.Fatal(err)
	}
	return dentest.Task(t, db, id), db
}

// runTimingOut runs a task that must time out after its program has
// printed started (a test of what a timeout stops). Under a heavy load a
// program's start alone can take longer than the timeout, and such a run
// checks nothing: it is run again with twice the timeout, from 3 s, until
// the program started in time, bounded only by the test's deadline. It
// returns the task and the timeout that ran it.
func runTimingOut(t *testing.T, policy command.Policy, params bson.D, started string, extra ...bson.E) (bson.Raw, int) {
	t.Helper()
	for timeout := 3; ; timeout *= 2 {
		raw := runTask(t, policy, params, append(extra, bson.E{Key: "timeout", Value: timeout})...)
		if strings.Contains(text(t, raw, "stdout"), started) {
			return raw, timeout
		}
		if time.Now().After(dentest.Deadline()) {
			t.Fatalf("at the test's deadline the program had not printed %q within its timeout of %d s; stdout %q, stderr %q",
				started, timeout, text(t, raw, "stdout"), text(t, raw, "stderr"))
		}
		t.Logf("the program had not printed %q when its %d s timeout fired (a loaded machine): again with %d s", started, timeout, 2*timeout)
	}
}

// hostDir makes a directory, removed at the test's end, that tasks'
// programs see: t.TempDir is under /tmp, where a task in its own mount
// namespace sees its own temporary directory instead. Anyone may enter it
// (the task user too).
func hostDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "den-command-test-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func text(t *testing.T, raw bson.Raw, field string) string {
	v := raw.Lookup(field)
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	t.Fatalf("%s is %s", field, v.Type)
	return ""
}

// sh allows the shell and all of /usr/bin (where, on a merged-/usr
// system, /bin/sh lives too). Landlock is enforced where the kernel has it.
var sh = command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/bin/sh", "/usr/bin/"}, Shell: true, Env: []string{"PATH"},
	EnvAllow: []string{"GREETING"}, Landlock: command.LandlockOptional}

func TestCommandOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		policy   command.Policy
		params   bson.D
		status   int64
		stdout   string
		stderr   string
		exitCode any
		signal   string
		// outcome, when set, is the run's; a refused task runs with
		// max_retries 2 and must end at once, never retried.
		outcome string
	}{
		{name: "exit 0", policy: sh, params: bson.D{{Key: "command", Value: bson.A{"/bin/sh", "-c", "echo hello; echo oops >&2"}}},
			status: 1, stdout: "hello\n", stderr: "oops\n", exitCode: int32(0)},
		{name: "exit 3", policy: sh, params: bson.D{{Key: "command", Value: bson.A{"/bin/sh", "-c", "exit 3"}}},
			status: 2, stderr: "exited with code 3", exitCode: int32(3)},
		{name: "killed by a signal", policy: sh, params: bson.D{{Key: "shell", Value: "kill -KILL $$"}},
			status: 2, stderr: "killed by signal SIGKILL", signal: "SIGKILL"},
		{name: "stdin, dir and env", policy: sh, params: bson.D{{Key: "shell", Value: `read x; echo "$x $(pwd) $GREETING"`}, {Key: "stdin", Value: "in\n"}, {Key: "dir", Value: "/tmp"}, {Key: "env", Value: bson.D{{Key: "GREETING", Value: "hi"}}}},
			status: 1, stdout: "in /tmp hi\n", exitCode: int32(0)},
		{name: "environment not inherited", policy: sh, params: bson.D{{Key: "shell", Value: `echo "[$HOME]"`}},
			status: 1, stdout: "[]\n", exitCode: int32(0)},
		{name: "not allowed", policy: command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/usr/bin/true"}}, params: bson.D{{Key: "command", Value: bson.A{"/bin/sh", "-c", "echo no"}}},
			status: 2, stderr: "is not allowed on this node", outcome: queue.OutcomeRefused},
		{name: "shell not allowed", policy: command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/bin/sh"}}, params: bson.D{{Key: "shell", Value: "echo no"}},
			status: 2, stderr: "shell parameter is not allowed", outcome: queue.OutcomeRefused},
		{name: "disabled", policy: command.Policy{}, params: bson.D{{Key: "command", Value: bson.A{"/bin/true"}}},
			status: 2, stderr: "not enabled on this node", outcome: queue.OutcomePlugin},
		{name: "LD_PRELOAD refused", policy: sh, params: bson.D{{Key: "command", Value: bson.A{"/bin/sh", "-c", "true"}}, {Key: "env", Value: bson.D{{Key: "LD_PRELOAD", Value: "/tmp/x.so"}}}},
			status: 2, stderr: `does not let tasks set: "LD_PRELOAD"`, outcome: queue.OutcomeRefused},
		{name: "malformed command", policy: sh, params: bson.D{{Key: "command", Value: "/bin/true"}},
			status: 2, stderr: "command must be an array", outcome: queue.OutcomeRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var extra []bson.E
			if tc.outcome == queue.OutcomeRefused {
				extra = append(extra, bson.E{Key: "max_retries", Value: 2}, bson.E{Key: "retry_delay", Value: 0})
			}
			raw := runTask(t, tc.policy, tc.params, extra...)
			if o, _ := raw.Lookup("outcome").StringValueOK(); tc.outcome != "" && o != tc.outcome {
				t.Errorf("outcome %q (%s), want %q", o, raw.Lookup("outcome_reason"), tc.outcome)
			}
			if st, _ := raw.Lookup("status").AsInt64OK(); st != tc.status {
				t.Errorf("status %d, want %d (stderr %q)", st, tc.status, raw.Lookup("stderr"))
			}
			if tc.stdout != "" && text(t, raw, "stdout") != tc.stdout {
				t.Errorf("stdout %q, want %q", text(t, raw, "stdout"), tc.stdout)
			}
			if !strings.Contains(text(t, raw, "stderr"), tc.stderr) {
				t.Errorf("stderr %q lacks %q", text(t, raw, "stderr"), tc.stderr)
			}
			if tc.exitCode != nil && raw.Lookup("exit_code").AsInt64() != int64(tc.exitCode.(int32)) {
				t.Errorf("exit_code %v, want %v", raw.Lookup("exit_code"), tc.exitCode)
			}
			if tc.signal != "" && raw.Lookup("signal").StringValue() != tc.signal {
				t.Errorf("signal %v, want %s", raw.Lookup("signal"), tc.signal)
			}
		})
	}
}

// A timeout stops a program that ignores SIGTERM: SIGKILL after the grace
// time; the task fails with timed_out and keeps the output so far.
func TestTimeoutKillsStubbornProgram(t *testing.T) {
	t.Parallel()
	// The shell must have set its trap and said started before the
	// timeout fires: runTimingOut makes sure of it.
	raw, timeout := runTimingOut(t, sh, bson.D{{Key: "shell", Value: `trap "" TERM; echo started; sleep 60 & wait; sleep 60`}},
		"started", bson.E{Key: "max_termination_time", Value: 1})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !raw.Lookup("timed_out").Boolean() {
		t.Fatalf("status %d timed_out %v", st, raw.Lookup("timed_out"))
	}
	if text(t, raw, "stdout") != "started\n" {
		t.Errorf("partial stdout %q", text(t, raw, "stdout"))
	}
	if !strings.Contains(text(t, raw, "stderr"), fmt.Sprintf("timed out after %ds", timeout)) || !strings.Contains(text(t, raw, "stderr"), "SIGKILL") {
		t.Errorf("stderr %q", text(t, raw, "stderr"))
	}
}

// Output larger than the inline limit streams into GridFS.
func TestLargeOutputGoesToGridFS(t *testing.T) {
	t.Parallel()
	raw, db := runTaskIn(t, dentest.DB(t), sh, bson.D{{Key: "command", Value: bson.A{"/usr/bin/head", "-c", "20000000", "/dev/zero"}}})
	id, ok := raw.Lookup("stdout").ObjectIDOK()
	if !ok {
		t.Fatalf("stdout %s, want a GridFS file", raw.Lookup("stdout").Type)
	}
	r, err := gridfs.NewBucket(db, "tasks").Open(dentest.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Length != 20000000 {
		t.Fatalf("stored %d bytes", r.Length)
	}
}

// A child that ignores SIGTERM after its parent has exited is killed too
// when the task times out: in the node's PID namespace by den (the
// program's process group, then its supervisor), in the task's own by its
// init.
func TestTimeoutKillsLeftoverChildren(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared pids %v", shared), func(t *testing.T) {
			t.Parallel()
			p := sh
			p.SharedPIDs = shared
			mark := sleepMark(60)
			raw, _ := runTimingOut(t, p, bson.D{{Key: "shell", Value: startChild(mark)}},
				"started", bson.E{Key: "max_termination_time", Value: 1})
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !raw.Lookup("timed_out").Boolean() {
				t.Fatalf("status %d timed_out %v", st, raw.Lookup("timed_out"))
			}
			if out := text(t, raw, "stdout"); out != "started\n" {
				t.Fatalf("stdout %q, want started", out)
			}
			awaitNoneLeft(t, "the child", mark)
		})
	}
}
