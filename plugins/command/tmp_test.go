package command_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/sandbox"
)

// needNamespaces skips where den could not give a task a mount namespace
// of its own: the tests run as root on the development machine and CI,
// where it can.
func needNamespaces(t *testing.T) {
	t.Helper()
	if !sandbox.HasCaps(sandbox.CapsNamespaces) {
		t.Skipf("this test process lacks %s, so it cannot give tasks a mount namespace", sandbox.CapsNamespaces)
	}
}

// Each task has a temporary directory of its own: TMPDIR, and /tmp,
// /var/tmp and /dev/shm as it sees them; fresh, its user's, mode 0700, and
// removed when it ends. Two tasks running as the same user at once: the
// second finds nothing of the first's, neither where it would look (its
// /tmp) nor by the first's directory's path on the node.
func TestTaskTmpIsPrivate(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	secret := make([]byte, 16)
	rand.Read(secret)
	token := hex.EncodeToString(secret)
	gate := hostDir(t)
	if err := os.Chmod(gate, 0o755); err != nil {
		t.Fatal(err)
	}
	goOn := filepath.Join(gate, "go")
	first := fmt.Sprintf(`set -e; echo %s > "${TMPDIR:?no TMPDIR}/a"; echo %s > /var/tmp/b; echo %s > /dev/shm/c; `+
		`stat -c '%%u %%a' "$TMPDIR" .; pwd; while [ ! -e %s ]; do sleep 0.05; done`, token, token, token, goOn)
	done := make(chan bson.Raw, 1)
	go func() { done <- runTask(t, asTaskUser(sh), bson.D{{Key: "shell", Value: first}}) }()

	// The first task's directory, as the node sees it.
	var hostTmp string
	dentest.Eventually(t, 30*time.Second, "the first task wrote its files", func() bool {
		select {
		case raw := <-done:
			t.Fatalf("the first task ended early: status %v, stdout %q, stderr %q", raw.Lookup("status"), text(t, raw, "stdout"), text(t, raw, "stderr"))
		default:
		}
		files, _ := filepath.Glob(filepath.Join(os.TempDir(), "den-task-*", "a"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == token {
				hostTmp = filepath.Dir(f)
				return true
			}
		}
		return false
	})

	second := fmt.Sprintf(`ls -A /tmp /var/tmp /dev/shm; cat %s/a /tmp/a /var/tmp/b /dev/shm/c; ls -d /tmp/den-task-* %s; true`, hostTmp, os.TempDir()+"/den-task-*")
	raw := runTask(t, asTaskUser(sh), bson.D{{Key: "shell", Value: second}})
	if stdout := text(t, raw, "stdout"); strings.Contains(stdout, token) || strings.Contains(stdout, "den-task-") || stdout != "/dev/shm:\n\n/tmp:\n\n/var/tmp:\n" {
		t.Errorf("the second task saw the first's files: stdout %q, stderr %q", stdout, text(t, raw, "stderr"))
	}

	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	raw = <-done
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "65534 700\n65534 700\n/tmp\n" {
		t.Fatalf("first task: status %d, stdout %q (want its user, mode 700, and /tmp as its working directory), stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
	if _, err := os.Stat(hostTmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the first task's temporary directory is left: %v", err)
	}
}

// What a task leaves in its temporary directory is removed with it, even a
// directory it made unreadable: as the task's user, and as the node's
// where the task has no user of its own.
func TestTaskTmpRemovedWhateverTheTaskLeft(t *testing.T) {
	t.Parallel()
	for _, ownUser := range []bool{true, false} {
		t.Run(fmt.Sprintf("own user %v", ownUser), func(t *testing.T) {
			t.Parallel()
			p := sh
			if ownUser {
				needSetUser(t)
				p = asTaskUser(sh)
			}
			mark := make([]byte, 8)
			rand.Read(mark)
			name := "left-" + hex.EncodeToString(mark)
			raw := runTask(t, p, bson.D{{Key: "shell", Value: `cd "${TMPDIR:?no TMPDIR}" && mkdir -p ` + name + `/e && touch ` + name + `/e/f && chmod 0 ` + name + `/e ` + name}})
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 {
				t.Fatalf("status %d, stderr %q", st, text(t, raw, "stderr"))
			}
			if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "den-task-*", name)); len(left) > 0 {
				t.Fatalf("the task's temporary directory is left: %s", left)
			}
		})
	}
}

// command.shared_tmp leaves tasks the node's /tmp (for jobs that hand
// files over there); TMPDIR is still the task's own.
func TestSharedTmpKeepsTheNodesTmp(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "handed-over"), []byte("here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := asTaskUser(sh)
	p.SharedTmp = true
	raw := runTask(t, p, bson.D{{Key: "shell", Value: `cat ` + dir + `/handed-over; stat -c '%u %a' "${TMPDIR:?no TMPDIR}"`}})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "here\n65534 700\n" {
		t.Fatalf("status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
}
