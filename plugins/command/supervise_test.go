package command_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/plugins/command"
)

// Through den's own task runner (its supervisor, a subreaper, and its
// worker), a task running as its own user leaves a process that escaped
// its process group (setsid) and ignores SIGTERM, then exits, times out,
// or is stopped as the node stops a cancelled task's runner (SIGTERM):
// the supervisor, running as den's user, stops what the task's user left
// and counts it, across the change of user.
func TestDenRunnerStopsWhatTheTaskUserLeft(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	bin, err := dentest.BuildDen(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gate := hostDir(t)
	if err := os.Chmod(gate, 0o777); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(gate, "pid")
	for _, end := range []string{"exits", "timed out", "stopped"} {
		t.Run(end, func(t *testing.T) {
			timeout := end == "timed out"
			os.Remove(pidFile)
			script := `setsid sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; exec sleep 120' & ` +
				`while [ ! -s ` + pidFile + ` ]; do sleep 0.05; done`
			extra := []bson.E{{Key: "max_termination_time", Value: 1}}
			if end != "exits" {
				script += `; trap "" TERM; sleep 120`
			}
			if timeout {
				extra = append(extra, bson.E{Key: "timeout", Value: 1})
			}
			db := dentest.DB(t)
			qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
			id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0]
			dentest.Claim(t, db, id, "n", extra...)
			policy, _ := json.Marshal(asTaskUser(sh))
			env, err := runner.Spec{URI: dentest.URI(), Database: db.Name(), Node: "n", Task: id.Hex(), Plugin: command.Name, GFS: "auto", PluginConfig: policy}.Env()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "task-runner")
			cmd.Env = append(os.Environ(), env)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if end == "stopped" {
				// As the node stops a runner whose task was cancelled.
				dentest.Eventually(t, 30*time.Second, "the task left its process", func() bool {
					b, err := os.ReadFile(pidFile)
					return err == nil && strings.HasSuffix(string(b), "\n")
				})
				cmd.Process.Signal(syscall.SIGTERM)
			}
			if err := cmd.Wait(); err != nil && end != "stopped" {
				t.Fatalf("task-runner: %v\n%s", err, out.String())
			}
			raw := dentest.Task(t, db, id)
			b, _ := os.ReadFile(pidFile)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("the task left no pid (%q); stderr %q", b, text(t, raw, "stderr"))
			}
			if n, _ := raw.Lookup(runner.FieldLeftovers).AsInt64OK(); n < 1 {
				t.Errorf("%s %v, want the escaped process counted; stderr %q", runner.FieldLeftovers, raw.Lookup(runner.FieldLeftovers), text(t, raw, "stderr"))
			}
			if timedOut, _ := raw.Lookup("timed_out").BooleanOK(); timedOut != timeout {
				t.Errorf("timed_out %v", raw.Lookup("timed_out"))
			}
			dentest.Eventually(t, 10*time.Second, "the task user's escaped process is gone", func() bool { return syscall.Kill(pid, 0) != nil })
		})
	}
}
