package command_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
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
// /var/tmp, /dev/shm and /run/lock as it sees them; fresh, its user's,
// mode 0700, and gone when it ends. Two tasks running as the same user at
// once: the second finds nothing of the first's, neither where it would
// look (its /tmp, /run/lock) nor by the first's directory's path on the
// node; and nothing the first wrote is left on the node once it ended
// (/run/lock's files outlived their task before). By default
// (command.tmp_mb) that directory is a tmpfs in the task's mount
// namespace, which the node does not see at all; with tmp_mb 0 it is a
// directory under the node's /tmp.
func TestTaskTmpIsPrivate(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	for _, tmpMB := range []int64{command.DefaultTmpMB, 0} {
		t.Run(fmt.Sprintf("tmp_mb %d", tmpMB), func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(sh)
			p.TmpMB = tmpMB
			secret := make([]byte, 16)
			rand.Read(secret)
			token := hex.EncodeToString(secret)
			gate := hostDir(t)
			if err := os.Chmod(gate, 0o777); err != nil {
				t.Fatal(err)
			}
			ready, goOn := filepath.Join(gate, "ready"), filepath.Join(gate, "go")
			lock := "den-test-" + token
			t.Cleanup(func() { os.Remove(filepath.Join("/run/lock", lock)) })
			first := fmt.Sprintf(`set -e; echo %[1]s > "${TMPDIR:?no TMPDIR}/a"; echo %[1]s > /var/tmp/b; echo %[1]s > /dev/shm/c; echo %[1]s > /run/lock/%[2]s; `+
				`stat -c '%%u %%a' "$TMPDIR" .; pwd; touch %[3]s; while [ ! -e %[4]s ]; do sleep 0.05; done`, token, lock, ready, goOn)
			done := make(chan bson.Raw, 1)
			go func() { done <- runTask(t, p, bson.D{{Key: "shell", Value: first}}) }()
			dentest.Eventually(t, 30*time.Second, "the first task wrote its files", func() bool {
				select {
				case raw := <-done:
					t.Fatalf("the first task ended early: status %v, stdout %q, stderr %q", raw.Lookup("status"), text(t, raw, "stdout"), text(t, raw, "stderr"))
				default:
				}
				_, err := os.Stat(ready)
				return err == nil
			})

			// The first task's files, as the node sees them: in its
			// directory under the node's /tmp, or nowhere (a tmpfs).
			var hostTmp string
			files, _ := filepath.Glob(filepath.Join(os.TempDir(), "den-task-*", "a"))
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == token {
					hostTmp = filepath.Dir(f)
				}
			}
			if (hostTmp != "") != (tmpMB == 0) {
				t.Errorf("the first task's file on the node: %q", hostTmp)
			}
			if _, err := os.Stat(filepath.Join("/run/lock", lock)); err == nil {
				t.Errorf("the first task's file is in the node's /run/lock")
			}
			others := os.TempDir() + "/den-task-*"
			second := fmt.Sprintf(`ls -A /tmp /var/tmp /dev/shm /run/lock; cat %s/a /tmp/a /var/tmp/b /dev/shm/c /run/lock/%s; ls -d /tmp/den-task-* %s; cat %s/a; true`,
				hostTmp, lock, others, others)
			raw := runTask(t, p, bson.D{{Key: "shell", Value: second}})
			if stdout := text(t, raw, "stdout"); strings.Contains(stdout, token) || strings.Contains(stdout, "den-task-") || stdout != "/dev/shm:\n\n/run/lock:\n\n/tmp:\n\n/var/tmp:\n" {
				t.Errorf("the second task saw the first's files: stdout %q, stderr %q", stdout, text(t, raw, "stderr"))
			}

			if err := os.WriteFile(goOn, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			raw = <-done
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "65534 700\n65534 700\n/tmp\n" {
				t.Fatalf("first task: status %d, stdout %q (want its user, mode 700, and /tmp as its working directory), stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
			}
			if hostTmp != "" {
				if _, err := os.Stat(hostTmp); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the first task's temporary directory is left: %v", err)
				}
			}
			if _, err := os.Stat(filepath.Join("/run/lock", lock)); err == nil {
				t.Errorf("the first task's file outlives it in the node's /run/lock")
			}
		})
	}
}

// A task's temporary directory is bounded by command.tmp_mb (by default
// 1 GiB): posix_fallocate of 5 GiB there fails (it succeeded on the
// node's disk), in the task's /tmp and, with command.shared_tmp, in its
// TMPDIR on the node.
func TestTaskTmpBounded(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared tmp %v", shared), func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(sh)
			p.TmpMB, p.SharedTmp = command.DefaultTmpMB, shared
			raw := runTask(t, p, bson.D{{Key: "shell", Value: `df -k --output=size "$TMPDIR" | tail -1; fallocate -l 5G "$TMPDIR/big" && echo allocated; ls -s "$TMPDIR"`}})
			stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
			if strings.Contains(stdout, "allocated") || !strings.Contains(stderr, "No space left on device") {
				t.Fatalf("5 GiB in the task's temporary directory: stdout %q, stderr %q", stdout, stderr)
			}
			if size := strings.Fields(stdout); len(size) == 0 || size[0] != strconv.Itoa(command.DefaultTmpMB*1024) {
				t.Errorf("df says the task's temporary directory is %q KiB, want %d", stdout, command.DefaultTmpMB*1024)
			}
		})
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
