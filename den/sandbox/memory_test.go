package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// buildAlloc builds testdata/alloc (static, without the race detector,
// whose shadow memory would not fit the limits) and returns its path.
func buildAlloc(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "alloc")
	cmd := exec.Command(goTool, "build", "-o", out, "./testdata/alloc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/alloc: %v\n%s", err, b)
	}
	return out
}

// A program that allocates and touches twice its memory limit is stopped,
// by both mechanisms, whether the sandbox becomes the program or stays as
// its init: in its memory cgroup, the kernel's OOM killer kills it
// (SIGKILL, counted in the cgroup); under RLIMIT_DATA, its allocation
// fails (Go's runtime exits 2). Half its limit it may use.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	exe := buildAlloc(t)
	const limit = 256 << 20
	for _, mechanism := range []string{"cgroup", "RLIMIT_DATA"} {
		for _, init := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, init %v", mechanism, init), func(t *testing.T) {
				t.Parallel()
				if mechanism == "RLIMIT_DATA" && init && raceEnabled {
					// The init, this test binary, lives under the limit it
					// sets for the program too: with the race detector's
					// shadow memory it does not fit in 256 MiB (den's
					// own binary, never built with it, does).
					t.Skip("the race detector's runtime in the init does not fit RLIMIT_DATA of 256 MiB; run without -race")
				}
				run := func(bytes int64) (string, Exit, string) {
					spec := Spec{Path: exe, Args: []string{"alloc", strconv.FormatInt(bytes, 10)}, MountNS: init, PIDNS: init, Memory: limit}
					if mechanism == "cgroup" {
						dir, err := NewMemoryCgroup(limit)
						if err != nil {
							t.Skipf("no memory cgroup for tasks here: %v", err)
						}
						defer RemoveMemoryCgroup(dir)
						spec.MemoryCgroup = dir
					}
					cmd, err := Command(spec, nil)
					if err != nil {
						t.Fatal(err)
					}
					cmd.Dir = "/"
					out, _ := cmd.CombinedOutput()
					end, _ := cmd.Exit()
					kills := ""
					if spec.MemoryCgroup != "" {
						kills = strconv.Itoa(OOMKills(spec.MemoryCgroup))
					}
					return string(out), end, kills
				}
				if out, end, _ := run(limit / 2); out != "allocated\n" || end.Status != 0 {
					t.Fatalf("half its limit: the program ended %#x and said %q", uint32(end.Status), out)
				}
				out, end, kills := run(2 * limit)
				ws := end.Status
				switch {
				case strings.Contains(out, "allocated"):
					t.Fatalf("twice its limit: the program allocated it (%#x)", uint32(ws))
				case mechanism == "cgroup" && (!ws.Signaled() || ws.Signal() != syscall.SIGKILL || kills != "1"):
					t.Fatalf("twice its limit: the program ended %#x, OOM kills %s, and said %q; want SIGKILL by the OOM killer", uint32(ws), kills, out)
				case mechanism == "RLIMIT_DATA" && (ws.ExitStatus() != 2 || !strings.Contains(out, "out of memory")):
					t.Fatalf("twice its limit: the program ended %#x and said %q; want Go's out of memory", uint32(ws), out)
				}
			})
		}
	}
}
