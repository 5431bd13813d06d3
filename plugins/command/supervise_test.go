package command_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/plugins/command"
)

// Through den's own task runner (its supervisor, a subreaper, and its
// worker), a task running as its own user leaves a process that escaped
// its process group (setsid) and ignores SIGTERM, then exits, times out,
// or is stopped as the node stops a cancelled task's runner (SIGTERM). In
// the node's PID namespace the supervisor, running as den's user, stops
// what the task's user left and counts it (leftover_processes), across the
// change of user; in the task's own, the task's init stops it (and says
// so in stderr), or goes with it.
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
	for _, shared := range []bool{true, false} {
		for _, end := range []string{"exits", "timed out", "stopped"} {
			t.Run(fmt.Sprintf("%s, shared pids %v", end, shared), func(t *testing.T) {
				timeout := end == "timed out"
				mark := sleepMark(120)
				pidFile := filepath.Join(gate, strings.ReplaceAll(mark, ".", "-"))
				script := `setsid sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; exec sleep ` + mark + `' & ` +
					`while [ ! -s ` + pidFile + ` ]; do sleep 0.05; done`
				extra := []bson.E{{Key: "max_termination_time", Value: 1}}
				if end != "exits" {
					script += `; trap "" TERM; sleep 120`
				}
				if timeout {
					// 3 s: the script must be running by then, under load too.
					extra = append(extra, bson.E{Key: "timeout", Value: 3})
				}
				db := dentest.DB(t)
				qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
				id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0]
				dentest.Claim(t, db, id, "n", extra...)
				p := asTaskUser(sh)
				p.SharedPIDs = shared
				policy, _ := json.Marshal(p)
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
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				var left []int
				if end != "exits" {
					left = awaitHostPids(t, mark, exited)
				}
				if end == "stopped" {
					// As the node stops a runner whose task was cancelled.
					cmd.Process.Signal(syscall.SIGTERM)
				}
				if err := <-exited; err != nil && end != "stopped" {
					t.Fatalf("task-runner: %v\n%s", err, out.String())
				}
				raw := dentest.Task(t, db, id)
				stderr := text(t, raw, "stderr")
				if shared {
					// The escaped process's pid is the node's.
					b, _ := os.ReadFile(pidFile)
					pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
					if err != nil {
						t.Fatalf("the task left no pid (%q); stderr %q", b, stderr)
					}
					left = append(left, pid)
					if n, _ := raw.Lookup(worker.FieldLeftovers).AsInt64OK(); n < 1 {
						t.Errorf("%s %v, want the escaped process counted; stderr %q", worker.FieldLeftovers, raw.Lookup(worker.FieldLeftovers), stderr)
					}
				} else if end == "exits" && !strings.Contains(stderr, "den: stopped 1 process(es) the task left running when it ended") {
					t.Errorf("stderr %q, want the init's count of the escaped process", stderr)
				}
				if timedOut, _ := raw.Lookup("timed_out").BooleanOK(); timedOut != timeout {
					t.Errorf("timed_out %v", raw.Lookup("timed_out"))
				}
				awaitGone(t, "the task user's escaped process", left)
				if pids := hostPids(mark); len(pids) > 0 {
					t.Errorf("the task user's escaped process runs on: %v", pids)
				}
			})
		}
	}
}
