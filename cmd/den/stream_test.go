package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/command"
)

// A program printing 48 MB: the output streams into GridFS, and the task
// runner's memory does not grow with it. Peak RSS is measured by the kernel
// (the largest of the runner's processes) and compared with a run of the
// same program printing one byte. The runner is the real den binary, built
// without -race; gfs true streams from the first byte (auto holds the first
// 15 MiB for the task document, an allowance that would hide a runner that
// holds everything).
func TestCommandOutputStreamsWithBoundedMemory(t *testing.T) {
	t.Parallel()
	const size = 48_000_000
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	run := func(size int) (bson.ObjectID, int64) {
		id := dentest.Tasks(t, db, qid, bson.D{{Key: "command", Value: bson.A{"/usr/bin/head", "-c", strconv.Itoa(size), "/dev/zero"}}})[0]
		dentest.Claim(t, db, id, "n")
		policy, _ := json.Marshal(command.Policy{Enabled: true, Allow: []string{"/usr/bin/head"}, Landlock: command.LandlockOptional, UserOptional: true})
		env, err := runner.Spec{URI: dentest.URI(), Database: db.Name(), Node: "n", Task: id.Hex(), Plugin: command.Name, GFS: "true", PluginConfig: policy}.Env()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(denBin(t), "task-runner")
		cmd.Env = append(os.Environ(), env)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("task-runner: %v\n%s", err, out)
		}
		maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
		t.Logf("%d bytes streamed in %s; runner peak RSS %d MiB", size, time.Since(start).Round(time.Millisecond), maxRSS>>20)
		return id, maxRSS
	}
	_, base := run(1)
	id, maxRSS := run(size)

	raw := dentest.Task(t, db, id)
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 {
		t.Fatalf("status %d, stderr %s", st, raw.Lookup("stderr"))
	}
	r, err := gridfs.NewBucket(db, "tasks").Open(dentest.Context(t), raw.Lookup("stdout").ObjectID())
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Length != size {
		t.Fatalf("stored %d bytes, want %d", r.Length, size)
	}
	// den output --raw streams it back from GridFS, byte for byte.
	out, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	show := exec.Command(denBin(t), "output", id.Hex(), "--raw", "--mongo-uri", dentest.URI(), "--database", db.Name())
	show.Stdout = out
	var errOut strings.Builder
	show.Stderr = &errOut
	if err := show.Run(); err != nil {
		t.Fatalf("den output: %v: %s", err, errOut.String())
	}
	if st, _ := out.Stat(); st.Size() != size {
		t.Fatalf("den output printed %d bytes, want %d", st.Size(), size)
	}
	// Measured here: 67-68 MiB for 1 byte, 16 MB and 48 MB alike. A runner
	// that held the output would need 48 MB more than for one byte.
	if maxRSS > base+16<<20 {
		t.Fatalf("runner peak RSS %d MiB for 48 MB of output, %d MiB for 1 byte: memory grows with output", maxRSS>>20, base>>20)
	}
}
