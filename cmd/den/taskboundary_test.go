package main

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
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

// testServerIPv4 is the test server's IPv4 address and port; the test
// is skipped when it has none.
func testServerIPv4(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(dentest.URI())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(strings.Split(u.Host, ",")[0])
	addrs, _ := net.LookupIP(host)
	var db string
	for _, a := range addrs {
		if a.To4() != nil {
			db = a.String() + ":" + port
		}
	}
	if db == "" {
		t.Skipf("the test server %s has no IPv4 address", host)
	}
	return db
}

// boundaryConfig writes the configuration of node boundary, on database
// name, whose command plugin runs the shell, /usr/bin and helper's
// directory as nobody with only port 443, and returns its path.
func boundaryConfig(t *testing.T, name, helper string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "den.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`mongo: {uri: %q, database: %q}
node: boundary
command: {enabled: true, allow: [/bin/sh, /usr/bin/, %s], shell: true, env: [PATH], user: nobody, network: [443]}
`, dentest.URI(), name, filepath.Dir(helper)+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A real node (den run), configured as issue 30's attacker found it, with
// command.user and command.network: [443] and every other command key at
// its default, runs tasks that try what got through before: the database
// past the port list (TCP, Multipath TCP, io_uring's socket, TCP Fast
// Open), den's own processes, keys and SysV IPC that outlive the task, a
// file left in /run/lock, 5 GiB of temporary files and 3 GiB of memory.
// Each is refused or bounded, and nothing of them is left on the node.
func TestNodeTaskBoundaryAsTheIssueTriedIt(t *testing.T) {
	t.Parallel()
	if !sandbox.HasCaps(sandbox.CapsUser+" "+sandbox.CapsNamespaces) || sandbox.LandlockABI() < 4 {
		t.Skip("this needs den's whole boundary: root (or its capabilities) and Landlock ABI 4")
	}
	helper := buildReach(t)
	db := testServerIPv4(t)
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "attacker", command.Name, 4, "fifo")
	cfg := boundaryConfig(t, d.Name(), helper)
	node, _, _ := start(t, "run", "--config", cfg, "--log-format", "json")
	var b [4]byte
	rand.Read(b[:])
	key := strconv.Itoa(int(binary.BigEndian.Uint32(b[:])&0x3fffffff) + 1)
	lock := "den-boundary-" + key
	t.Cleanup(func() { os.Remove(filepath.Join("/run/lock", lock)) })
	tasks := []struct {
		name   string
		params bson.D
		check  func(raw bson.Raw, stdout, stderr string) string // "" when refused or bounded
	}{
		{"the database past [443]", bson.D{{Key: "command", Value: bson.A{helper, "tcp:" + db, "mptcp:" + db, "uring-mptcp:" + db, "tfo:" + db, "tfo-sendmsg:" + db}}},
			func(_ bson.Raw, stdout, _ string) string {
				if strings.Count(stdout, "\n") != 5 || strings.Contains(stdout, ": ok") {
					return "reached"
				}
				return ""
			}},
		{"den's node", bson.D{{Key: "command", Value: bson.A{helper, "signal:" + strconv.Itoa(node.Process.Pid), "prlimit:" + strconv.Itoa(node.Process.Pid)}}},
			func(_ bson.Raw, stdout, _ string) string {
				if strings.Count(stdout, "no such process\n") != 2 {
					return "reached"
				}
				return ""
			}},
		{"keys and SysV IPC left behind", bson.D{{Key: "command", Value: bson.A{helper, "addkey:" + lock, "shm-leave:" + key + ":268435456", "msg-leave:" + key, "sem-leave:" + key}}},
			func(_ bson.Raw, stdout, _ string) string {
				if !strings.Contains(stdout, "addkey:"+lock+": function not implemented") {
					return "a key was added"
				}
				for _, kind := range []string{"shm", "msg", "sem"} {
					b, _ := os.ReadFile("/proc/sysvipc/" + kind)
					for _, l := range strings.Split(string(b), "\n") {
						if f := strings.Fields(l); len(f) > 0 && f[0] == key {
							return "its SysV " + kind + " outlives it on the node"
						}
					}
				}
				return ""
			}},
		{"a file left in /run/lock", bson.D{{Key: "shell", Value: `head -c 52428800 /dev/zero > /run/lock/` + lock + ` && echo written`}},
			func(_ bson.Raw, stdout, _ string) string {
				if _, err := os.Stat(filepath.Join("/run/lock", lock)); err == nil || stdout != "written\n" {
					return "the file is in the node's /run/lock, or was not written"
				}
				return ""
			}},
		{"5 GiB of temporary files", bson.D{{Key: "shell", Value: `fallocate -l 5G "$TMPDIR/big" && echo allocated`}},
			func(_ bson.Raw, stdout, stderr string) string {
				if strings.Contains(stdout, "allocated") || !strings.Contains(stderr, "No space left on device") {
					return "allocated"
				}
				return ""
			}},
		{"3 GiB of memory", bson.D{{Key: "command", Value: bson.A{helper, "alloc:3221225472"}}},
			func(raw bson.Raw, stdout, _ string) string {
				if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || strings.Contains(stdout, ": ok") {
					return "allocated"
				}
				return ""
			}},
	}
	ids := make([]bson.ObjectID, len(tasks))
	for i, tc := range tasks {
		ids[i] = dentest.Tasks(t, d, qid, tc.params)[0]
	}
	for i, tc := range tasks {
		var raw bson.Raw
		dentest.Eventually(t, 2*time.Minute, "the task "+tc.name+" ended", func() bool {
			raw = dentest.Task(t, d, ids[i])
			st, _ := raw.Lookup("status").AsInt64OK()
			return st >= 1
		})
		stdout, _ := raw.Lookup("stdout").StringValueOK()
		stderr, _ := raw.Lookup("stderr").StringValueOK()
		if why := tc.check(raw, stdout, stderr); why != "" {
			t.Errorf("%s: %s: stdout %q, stderr %q", tc.name, why, stdout, stderr)
		} else {
			t.Logf("%s: refused: stdout %q, stderr %q", tc.name, stdout, strings.TrimSpace(stderr))
		}
	}
}

// buildReach builds the command plugin's attacker (plugins/command's
// testdata/reach) where the task's user may execute it.
func buildReach(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "den-boundary-test-")
	if err != nil {
		t.Skipf("no directory tasks can see: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(dir, "reach")
	cmd := exec.Command(goTool, "build", "-o", out, "../../plugins/command/testdata/reach")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build reach: %v\n%s", err, b)
	}
	return out
}
