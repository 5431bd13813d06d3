package dentest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process started with the binary's mark is stopped by the sweep, one
// that ignores SIGTERM too (after the grace); others are left alone.
func TestSweepStopsMarkedProcesses(t *testing.T) {
	token := sweepToken() + ".test"
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), EnvSweep+"="+token)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	polite := start("exec sleep 60")
	stubborn := start("trap '' TERM; sleep 60 & wait")
	other := exec.Command("sleep", "60")
	other.Env = append(os.Environ(), EnvSweep+"="+token+"x")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	// The first shell has become sleep, the second ignores SIGTERM.
	if !Until(10*time.Millisecond, func() bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", polite.Process.Pid))
		return strings.TrimSpace(string(comm)) == "sleep" && ignoresTerm(stubborn.Process.Pid)
	}) {
		t.Fatal("the shells did not start")
	}
	if n := sweep(token, time.Second); n < 2 {
		t.Errorf("sweep found %d processes, want at least the 2 marked ones", n)
	}
	for _, cmd := range []*exec.Cmd{polite, stubborn} {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("%v still running after the sweep", cmd.Args)
		}
	}
	// A killed process is gone from /proc once reaped: its parent (a shell
	// the sweep also stopped, or init) may take a moment.
	var left []int
	if !Until(50*time.Millisecond, func() bool { left = marked(token); return len(left) == 0 }) {
		t.Errorf("marked processes left: %v", left)
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Errorf("an unmarked process was stopped: %v", err)
	}
}

// ignoresTerm reports whether process pid ignores SIGTERM (SigIgn in its
// /proc status).
func ignoresTerm(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGTERM-1)) != 0
		}
	}
	return false
}
