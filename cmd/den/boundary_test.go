package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// The real den binary, as a node starts it (den task-runner, its
// supervisor and worker), puts the command plugin's program inside the
// kernel's execute boundary: an allowed find cannot execute /bin/sh, and
// the task runs with nothing of den's in its environment but the run
// marker.
func TestDenBinaryRunsProgramsInsideExecBoundary(t *testing.T) {
	t.Parallel()
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock, so the execute boundary cannot be checked here")
	}
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "command", Value: bson.A{"/usr/bin/find", "/usr/bin/env", "-exec", "{}", ";", "-exec", "/bin/sh", "-c", "echo pwned", ";"}}})[0]
	dentest.Claim(t, db, id, "n")
	policy, _ := json.Marshal(command.Policy{Enabled: true, Allow: []string{"/usr/bin/find", "/usr/bin/env"}, UserOptional: true})
	env, err := runner.Spec{URI: dentest.URI(), Database: db.Name(), Node: "n", Task: id.Hex(), Plugin: command.Name, GFS: "auto", PluginConfig: policy}.Env()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(denBin(t), "task-runner")
	cmd.Env = append(os.Environ(), env)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("task-runner: %v\n%s", err, out)
	}
	raw := dentest.Task(t, db, id)
	stdout, stderr := raw.Lookup("stdout").StringValue(), raw.Lookup("stderr").StringValue()
	if strings.Contains(stdout, "pwned") || !strings.Contains(stderr, "/bin/sh': Permission denied") {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	// The allowed env ran, under find, and printed its environment.
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if strings.HasPrefix(line, "DEN_") && !strings.HasPrefix(line, "DEN_RUN=") {
			t.Errorf("den's variable reached the program: %s", line)
		}
	}
	if !strings.Contains(stdout, "DEN_RUN="+id.Hex()+".") {
		t.Errorf("stdout %q lacks the run marker", stdout)
	}
}
