package timerslack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/timerslack"
	"github.com/den-project/den/den/sandbox"
)

// envRole makes the test binary, run again by a test, play a role.
const envRole = "TIMERSLACK_TEST_ROLE"

func TestMain(m *testing.M) {
	sandbox.Main() // the sandbox's trampoline, when a test started a program through it
	if os.Getenv(envRole) == "reexec" {
		os.Exit(reexecRole())
	}
	os.Exit(m.Run())
}

// report is what the reexec role says of itself once Reexec returns.
type report struct {
	Original string  `json:"original"`
	Threads  []int64 `json:"threads"` // the slack of distinct threads, made after the start
	Err      string  `json:"err"`
}

func reexecRole() int {
	var r report
	if err := timerslack.Reexec(); err != nil {
		r.Err = err.Error()
	}
	r.Original = os.Getenv(timerslack.EnvOriginal)
	// Goroutines locked to threads at once: each has a thread of its own,
	// most of them made by the runtime now, from its other threads.
	var mu sync.Mutex
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 6 {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ns, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
			mu.Lock()
			if err != nil {
				r.Err = err.Error()
			}
			r.Threads = append(r.Threads, int64(ns))
			mu.Unlock()
			wg.Done()
			<-release
		}()
	}
	wg.Wait()
	close(release)
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

func ownSlack(t *testing.T) int64 {
	t.Helper()
	ns, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return int64(ns)
}

// Reexec runs the process again, once, with every thread at Slack (the
// runtime's threads included, which are made from the first one), and
// records the slack it was started with.
func TestReexecGivesEveryThreadTheSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	started := ownSlack(t)
	if time.Duration(started) >= timerslack.Slack {
		t.Skipf("this test runs with a timer slack of %d ns already", started)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"=reexec")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Err != "" || r.Original != strconv.FormatInt(started, 10) {
		t.Fatalf("after Reexec: error %q, %s=%q; want no error and the slack it was started with, %d", r.Err, timerslack.EnvOriginal, r.Original, started)
	}
	for _, ns := range r.Threads {
		if ns != timerslack.Slack.Nanoseconds() {
			t.Fatalf("after Reexec the threads' slacks are %v ns, want %d each", r.Threads, timerslack.Slack.Nanoseconds())
		}
	}
}

// A task's program, started through den's sandbox from a thread with
// den's slack, runs with the node's original slack, as it did before den
// raised its own; without an original recorded it inherits the
// starter's.
func TestSandboxedProgramGetsTheNodesSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	original := ownSlack(t)
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(timerslack.Slack.Nanoseconds()), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(original), 0, 0, 0)
	// Executed by the sandbox itself, or (pidns) forked by the sandbox
	// as the init of the task's PID namespace, as the command plugin
	// runs tasks by default.
	program := func(pidns bool) int64 {
		t.Helper()
		spec := sandbox.Spec{Path: "/bin/cat", Args: []string{"cat", "/proc/self/timerslack_ns"}, MountNS: pidns, PIDNS: pidns}
		cmd, err := sandbox.Command(spec, []string{"PATH=/usr/bin:/bin"})
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %s", err, errOut.String())
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
		if err != nil {
			t.Fatalf("the program printed %q", out.String())
		}
		return ns
	}
	ways := []bool{false}
	if sandbox.HasCaps(sandbox.CapsNamespaces) {
		ways = append(ways, true)
	} else {
		t.Logf("this test process lacks %s: the PID namespace's init is not tried", sandbox.CapsNamespaces)
	}
	const nodes = 70000 // not the kernel's default, so that it cannot come from elsewhere
	for _, pidns := range ways {
		os.Unsetenv(timerslack.EnvOriginal)
		if ns := program(pidns); ns != timerslack.Slack.Nanoseconds() {
			t.Fatalf("pidns %v: without %s the program's slack is %d ns, want the starter's %d", pidns, timerslack.EnvOriginal, ns, timerslack.Slack.Nanoseconds())
		}
		t.Setenv(timerslack.EnvOriginal, fmt.Sprint(nodes))
		if ns := program(pidns); ns != nodes {
			t.Fatalf("pidns %v: the program's slack is %d ns, want the node's original %d", pidns, ns, nodes)
		}
	}
}
