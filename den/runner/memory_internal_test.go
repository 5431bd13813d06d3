package runner

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// envHold makes TestHoldForTrampoline wait, as a child process that is
// this very binary without any sandbox spec in its environment: what a
// program looks like between Go's fork and its exec.
const envHold = "DEN_TEST_HOLD"

func TestHoldForTrampoline(t *testing.T) {
	if os.Getenv(envHold) == "" {
		t.Skip("only a helper process of TestTrampolineIsAnyChildStillDen")
	}
	time.Sleep(time.Minute)
}

// A child of the worker that is still den's binary is den's, whether or
// not it carries the sandbox's spec (a program between fork and exec
// shares the worker's memory); a child running another program is the
// task's. Here this test process plays the worker.
func TestTrampolineIsAnyChildStillDen(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), envHold+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	den := start(exe, "-test.run=^TestHoldForTrampoline$")
	other := start("sleep", "60")
	me := int32(os.Getpid())
	deadline := time.Now().Add(30 * time.Second)
	for !trampoline(int32(den.Process.Pid), me) {
		if time.Now().After(deadline) {
			t.Fatal("a child of the worker running den's binary, without a sandbox spec, is not taken for den's")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Once it has exec'd (before, it is den's binary too).
	for trampoline(int32(other.Process.Pid), me) {
		if time.Now().After(deadline) {
			t.Fatal("a child running another program is taken for den's")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if trampoline(int32(den.Process.Pid), me+1) {
		t.Error("a process that is not the worker's child is taken for den's")
	}
}
