package command_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

// A task in a PID namespace of its own knows its processes by the
// namespace's pids only, so a test finds them on the node by a mark in
// their command line: a sleep whose duration is unique to the test.

// sleepMark returns a duration for sleep(1) that no other process has:
// whole seconds and a random fraction ("120.4711234").
func sleepMark(seconds int) string {
	n, _ := rand.Int(rand.Reader, big.NewInt(1e7))
	return fmt.Sprintf("%d.%07d", seconds, n.Int64()+1)
}

// hostPids returns the live processes of the node whose command line has
// arg among its arguments.
func hostPids(arg string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(append([]byte{0}, b...), []byte("\x00"+arg+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() && !zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	return err != nil || i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// awaitHostPids waits until a process with arg runs on the node, while
// the task whose result done will carry runs, and returns them.
func awaitHostPids[T any](t *testing.T, arg string, done <-chan T) []int {
	t.Helper()
	var pids []int
	dentest.Eventually(t, 30*time.Second, "the task's process "+arg+" runs", func() bool {
		select {
		case <-done:
			t.Fatalf("the task ended before its process %s was seen", arg)
		default:
		}
		pids = hostPids(arg)
		return len(pids) > 0
	})
	return pids
}

// startChild is a shell fragment that starts `sleep mark` in the
// background, ignoring SIGTERM, and prints "started" once the child runs
// sleep (its command line says so): a test then knows the child was there
// whatever the task's timeout, without racing it to /proc.
func startChild(mark string) string {
	return `sh -c 'trap "" TERM; exec sleep ` + mark + `' & until tr '\0' ' ' < /proc/$!/cmdline 2>/dev/null | grep -q ` + mark + `; do :; done; echo started; wait`
}

// awaitNoneLeft waits until no process of the node has mark among its
// arguments.
func awaitNoneLeft(t *testing.T, what, mark string) {
	t.Helper()
	dentest.Eventually(t, 10*time.Second, what+" is gone", func() bool { return len(hostPids(mark)) == 0 })
}

// awaitGone waits until none of pids runs any more.
func awaitGone(t *testing.T, what string, pids []int) {
	t.Helper()
	dentest.Eventually(t, 10*time.Second, what+" is gone", func() bool {
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil && !zombie(p) {
				return false
			}
		}
		return true
	})
}
