package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// den output --follow prints what a task writes while it runs, on a real
// node (den run) running the command plugin, for output kept for the task
// document (gfs auto) and output streamed into GridFS (gfs true), on
// stdout and on stderr: the first line is printed while the task is still
// waiting for the test's signal to go on, and when it ends the rest
// follows from the stored output, nothing printed twice. A task nobody
// follows gets no live output written.
func TestFollowPrintsOutputWhileTheTaskRuns(t *testing.T) {
	t.Parallel()
	for _, gfs := range []string{"auto", "true"} {
		t.Run("gfs "+gfs, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			qid := dentest.Queue(t, db, "cmd", command.Name, 2, "fifo", bson.E{Key: "gfs", Value: gfs})
			dir := t.TempDir()
			cfg := filepath.Join(dir, "den.yaml")
			err := os.WriteFile(cfg, []byte(fmt.Sprintf(`mongo: {uri: %q, database: %q}
node: follow-%s
command: {enabled: true, allow: [/bin/, /usr/bin/], shell: true, env: [PATH], landlock: optional, user_optional: true, shared_tmp: true}
`, dentest.URI(), db.Name(), gfs)), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			start(t, "run", "--config", cfg, "--log-format", "json")

			// Each task prints a line to each stream, waits for its go file,
			// prints another and ends.
			task := func(name string) (bson.ObjectID, string) {
				gate := filepath.Join(dir, name)
				script := fmt.Sprintf(`echo first out; echo first err >&2; while [ ! -e %s ]; do sleep 0.1; done; echo second out; echo second err >&2`, gate)
				return dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0], gate
			}
			followed, gateF := task("go-followed")
			alone, gateA := task("go-alone")
			dentest.WaitStatus(t, db, followed, 0)
			dentest.WaitStatus(t, db, alone, 0)

			args := []string{"output", followed.Hex(), "--follow", "--mongo-uri", dentest.URI(), "--database", db.Name()}
			outCmd, out, outErr := start(t, args...)
			errCmd, errs, _ := start(t, append(args, "--stderr")...)
			dentest.Eventually(t, time.Minute, "the first lines followed while the task runs", func() bool {
				return out.String() == "first out\n" && errs.String() == "first err\n"
			})
			raw := dentest.Task(t, db, followed)
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 0 {
				t.Fatalf("status %d while its go file is missing", st)
			}
			if _, err := os.Stat(gateF); err == nil {
				t.Fatal("the go file exists already")
			}
			if !strings.Contains(outErr.String(), "following its output") {
				t.Errorf("follow said on stderr: %s", outErr)
			}
			// The task nobody follows has been running as long: nothing
			// published for it.
			if raw := dentest.Task(t, db, alone); raw.Lookup("live").Type != 0 || raw.Lookup("live_until").Type != 0 {
				t.Fatalf("a task nobody follows has live output: %s", raw)
			}

			for _, gate := range []string{gateF, gateA} {
				if err := os.WriteFile(gate, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			waitExit(t, outCmd)
			waitExit(t, errCmd)
			if out.String() != "first out\nsecond out\n" || errs.String() != "first err\nsecond err\n" {
				t.Fatalf("followed stdout %q, stderr %q", out, errs)
			}
			raw = dentest.WaitStatus(t, db, followed, 1)
			if raw.Lookup("live").Type != 0 {
				t.Fatalf("live output left in an ended task: %s", raw.Lookup("live"))
			}
			if gfs == "true" && raw.Lookup("stdout").Type != bson.TypeObjectID {
				t.Fatalf("gfs true stored stdout as %s", raw.Lookup("stdout").Type)
			}
			dentest.WaitStatus(t, db, alone, 1)
		})
	}
}

// waitExit waits for a command started by start to exit 0.
func waitExit(t *testing.T, cmd interface{ Wait() error }) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-dentest.GiveUp():
		t.Fatal("did not exit by the test's deadline")
	}
}
