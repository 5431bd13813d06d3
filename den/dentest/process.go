package dentest

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/shirou/gopsutil/v4/process"
)

// GroupLeader starts a process that sleeps, leading its own process group
// as a task runner does, for tests that forge a runner field naming it.
// It returns the process, its start time as den records a runner's (ms
// since the epoch), and a channel closed once it has ended and been reaped
// (a killed process then shows as gone: signal 0 succeeds on a zombie;
// its ProcessState is then set). It is killed at cleanup.
func GroupLeader(t testing.TB) (cmd *exec.Cmd, started int64, exited <-chan struct{}) {
	t.Helper()
	cmd = exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a group leader: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	p, err := process.NewProcess(int32(cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read process %d: %v", cmd.Process.Pid, err)
	}
	if started, err = p.CreateTime(); err != nil {
		t.Fatalf("read the start time of process %d: %v", cmd.Process.Pid, err)
	}
	return cmd, started, done
}
