package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// denExit runs the den binary to completion and returns its stdout,
// stderr and exit status.
func denExit(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(denBin(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "DEN_MONGO_URI=", "DEN_DATABASE=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("den %v: %v", args, err)
	}
	return out.String(), errOut.String(), 0
}

// The operator commands through the real binary: a queue created, tasks
// added from stdin, counts checked, the tasks listed; and the exit codes
// scripts rely on.
func TestOperatorCommandsThroughBinary(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	at := []string{"--mongo-uri", dentest.URI(), "--database", db.Name()}
	run := func(stdin string, want int, args ...string) string {
		t.Helper()
		out, errOut, code := denExit(t, stdin, append(args, at...)...)
		if code != want {
			t.Fatalf("den %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out
	}
	run("", 0, "queue", "create", "demo", "--plugin", demo.Name, "--maxthreads", "4")
	out := run("{\"commands\":\"a\"}\n{\"commands\":\"ab\"}\n", 0, "task", "add", "demo")
	if !strings.Contains(out, "added 2 tasks") {
		t.Errorf("task add printed %q", out)
	}
	run("", 0, "counts", "check")
	if n := dentest.CountTasks(t, db, bson.D{{Key: "status", Value: -2}}); n != 2 {
		t.Fatalf("%d queued tasks, want 2", n)
	}
	if out := run("", 0, "task", "list", "--queue", "demo", "--json"); strings.Count(out, `"status_name": "queued"`) != 2 {
		t.Errorf("task list --json:\n%s", out)
	}
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "name", Value: "demo"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: 0}}}})
	run("", 1, "counts", "check")
	run("", 2, "queue", "list", "--no-such-flag")
	if _, errOut, code := denExit(t, "", "queue", "list"); code != 2 || !strings.Contains(errOut, "no MongoDB configured") {
		t.Errorf("without a database: exit %d, %q", code, errOut)
	}
	if out, _, code := denExit(t, "", "--version"); code != 0 || !strings.HasPrefix(out, "den ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}
