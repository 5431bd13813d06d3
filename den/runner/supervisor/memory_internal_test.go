package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/internal/testdeadline"
)

// envHold makes a re-executed test binary wait a minute and nothing else
// (dentest.EnvRole, with the role main_test.go gives; this package's own
// tests cannot import dentest).
const envHold = "DEN_TEST_ROLE=hold"

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
		cmd.Env = append(os.Environ(), envHold)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	den := start(exe)
	other := start("sleep", "60")
	me := int32(os.Getpid())
	testdeadline.Wait(t, 20*time.Millisecond, "a child of the worker running den's binary, without a sandbox spec, to be taken for den's", func() bool {
		return trampoline(int32(den.Process.Pid), me)
	})
	// Once it has exec'd (before, it is den's binary too).
	testdeadline.Wait(t, 20*time.Millisecond, "a child running another program to be no longer taken for den's", func() bool {
		return !trampoline(int32(other.Process.Pid), me)
	})
	if trampoline(int32(den.Process.Pid), me+1) {
		t.Error("a process that is not the worker's child is taken for den's")
	}
}

// A usage sample leaves den's trampolines out of the run's memory, as the
// memory limit does: a sample that met one (den's sandbox before it execs
// the program, a child between fork and exec) counted a second worker,
// and a small task on a fresh runner peaked at 68 MB instead of 35 MB
// when sampled often. The task's own programs count. Here a shell plays
// the worker, with a trampoline and a program as its children.
func TestUsageSampleLeavesOutTrampolines(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	worker := exec.Command("sh", "-c", `"$0" & sleep 60 & wait`, exe)
	worker.Env = append(os.Environ(), envHold)
	worker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-worker.Process.Pid, syscall.SIGKILL); worker.Wait() })
	pid := int32(worker.Process.Pid)
	var den, program int32
	testdeadline.Wait(t, 20*time.Millisecond, "the worker's children to become a trampoline and a program", func() bool {
		den, program = 0, 0
		for _, kid := range contain.Descendants(context.Background(), pid) {
			if trampoline(kid, pid) {
				den = kid
			} else if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", kid)); string(b) == "sleep\n" {
				program = kid
			}
		}
		return den != 0 && program != 0
	})
	rss := func(pid int32) int64 {
		st, ok := contain.ReadStat(pid)
		if !ok {
			t.Fatalf("process %d is gone", pid)
		}
		return st.RSSPages * int64(os.Getpagesize())
	}
	s := &sampler{me: pid, worker: pid}
	s.sample(context.Background())
	denRSS, programRSS := rss(den), rss(program)
	// The program's RSS may move by a page or two between the reads.
	if s.peakRSS >= programRSS+denRSS/2 || s.taskRSS >= programRSS+denRSS/2 {
		t.Errorf("the sample counted den's trampoline: peak %d bytes, task %d; the program holds %d, the trampoline %d",
			s.peakRSS, s.taskRSS, programRSS, denRSS)
	}
	if s.peakRSS < programRSS/2 || s.taskRSS < programRSS/2 {
		t.Errorf("the sample left out the task's program: peak %d bytes, task %d; the program holds %d", s.peakRSS, s.taskRSS, programRSS)
	}
}
