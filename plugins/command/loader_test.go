package command_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// The loader hole, tried as an attacker would with only exact programs
// allowed (a shell, env and cp; not id): the dynamic loader, which every
// dynamically linked program needs the kernel to execute, run as a
// program loads any ELF file it can map for execution. In the task's
// mount namespace every mount is noexec but the allowed programs, the
// loaders and the library directories, so the loader cannot map a
// program that is not allowed (id), nor one the task wrote (in its
// temporary directory, its working directory, /run/lock), and the kernel
// refuses executing what the task wrote anyway (Landlock).
func TestLoaderRunsNothingNotAllowed(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	needLandlock(t)
	loader := sandbox.Loaders("/usr/bin/id")
	if len(loader) == 0 {
		t.Skip("/usr/bin/id is not a dynamically linked program here")
	}
	ld := loader[0]
	work := hostDir(t)
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	lockCopy := filepath.Join("/run/lock", filepath.Base(work)+"-id")
	t.Cleanup(func() { os.Remove(lockCopy) })
	policy := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/bin/sh", "/usr/bin/dash", "/usr/bin/env", "/usr/bin/cp"}, Shell: true})
	attempts := map[string]string{
		"env runs the loader on id":    `env ` + ld + ` /usr/bin/id`,
		"the shell runs the loader":    ld + ` /usr/bin/id`,
		"id copied to TMPDIR":          `cp /usr/bin/id "$TMPDIR/myid" && ` + ld + ` "$TMPDIR/myid"`,
		"id copied to TMPDIR, run":     `cp /usr/bin/id "$TMPDIR/myid2" && "$TMPDIR/myid2"`,
		"id copied to the working dir": `cp /usr/bin/id ./myid && ` + ld + ` ./myid`,
		"id copied to /run/lock":       `cp /usr/bin/id ` + lockCopy + ` && ` + ld + ` ` + lockCopy,
		"the loader copied":            `cp ` + ld + ` "$TMPDIR/ld" && "$TMPDIR/ld" /usr/bin/id`,
	}
	for name, script := range attempts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := runTask(t, policy, bson.D{{Key: "shell", Value: script}, {Key: "dir", Value: work}})
			stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
			if strings.Contains(stdout, "uid=") {
				t.Fatalf("id ran: stdout %q", stdout)
			}
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 {
				t.Fatalf("status %d, stderr %q", st, stderr)
			}
			t.Logf("refused: %q", stderr)
		})
	}
	// The allowed programs still run, with their libraries.
	raw := runTask(t, policy, bson.D{{Key: "shell", Value: `env >/dev/null && cp /dev/null "$TMPDIR/x" && echo ran`}, {Key: "dir", Value: work}})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "ran\n" {
		t.Fatalf("the allowed programs did not run: status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
}
