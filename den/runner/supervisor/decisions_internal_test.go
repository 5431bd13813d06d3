package supervisor

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/den-project/den/den/runner"
)

// SIGCHLD reaps and goes nowhere; every other signal the supervisor
// catches goes on to the worker, and only the first request to stop arms
// the timer after which the worker is killed.
func TestSignalAction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig   syscall.Signal
		armed bool
		want  action
	}{
		{syscall.SIGCHLD, false, action{reap: true}},
		{syscall.SIGCHLD, true, action{reap: true}},
		{syscall.SIGTERM, false, action{forward: true, armKill: true}},
		{syscall.SIGTERM, true, action{forward: true}},
		{syscall.SIGINT, false, action{forward: true, armKill: true}},
		{syscall.SIGINT, true, action{forward: true}},
		{syscall.SIGHUP, false, action{forward: true}},
		{syscall.SIGUSR1, false, action{forward: true}}, // live output
	} {
		if got := signalAction(tc.sig, tc.armed); got != tc.want {
			t.Errorf("%s (kill timer armed: %t): %+v, want %+v", tc.sig, tc.armed, got, tc.want)
		}
	}
}

// The memory of a run is watched while its task has a memory request,
// and its usage sampled about every sampleEvery.
func TestMemoryTicksAndSampleDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit int64
		want  bool
	}{{0, false}, {-1, false}, {1, true}, {64 << 20, true}} {
		if got := memoryTicks(tc.limit); got != tc.want {
			t.Errorf("memory request %d bytes: ticks %t, want %t", tc.limit, got, tc.want)
		}
	}
	for _, tc := range []struct {
		since time.Duration
		want  bool
	}{
		{0, false},
		{time.Second, false},
		{sampleEvery - sampleEvery/4 - time.Millisecond, false},
		{sampleEvery - sampleEvery/4, true},
		{sampleEvery, true},
		{time.Minute, true},
	} {
		if got := sampleDue(tc.since); got != tc.want {
			t.Errorf("%s since the last sample: due %t, want %t", tc.since, got, tc.want)
		}
	}
}

// The supervisor exits with its worker's code, or 128 plus the signal
// that killed it, which it logs as a run to rescue unless the worker was
// between tasks.
func TestExitOf(t *testing.T) {
	t.Parallel()
	exitedWith := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	killedBy := func(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }
	for _, tc := range []struct {
		name     string
		ws       syscall.WaitStatus
		idling   bool
		wantCode int
		wantEnd  workerEnd
	}{
		{"exited 0", exitedWith(0), false, 0, exited},
		{"exited 1", exitedWith(1), false, 1, exited},
		{"exited 2 idle", exitedWith(2), true, 2, exited},
		{"killed running", killedBy(syscall.SIGKILL), false, 128 + 9, killedRunning},
		{"killed idle", killedBy(syscall.SIGKILL), true, 128 + 9, killedIdle},
		{"terminated running", killedBy(syscall.SIGTERM), false, 128 + 15, killedRunning},
		{"stopped", syscall.WaitStatus(0x7f | int(syscall.SIGSTOP)<<8), false, 1, unknown},
	} {
		code, end := exitOf(tc.ws, tc.idling)
		if code != tc.wantCode || end != tc.wantEnd {
			t.Errorf("%s: exit %d (%d), want %d (%d)", tc.name, code, end, tc.wantCode, tc.wantEnd)
		}
	}
}

// The worker gets stdin, stdout, stderr and the control channel as
// ControlFD, then the relay's control channel and the task channel, each
// where there is one, named in its environment by the number it has there.
func TestWorkerFiles(t *testing.T) {
	t.Parallel()
	relay, tasks := runner.EnvRelayFD+"=", runner.EnvTasksFD+"="
	for _, tc := range []struct {
		name         string
		relay, tasks int
		wantEnv      []string
		wantFiles    []uintptr
	}{
		{"neither", -1, -1, nil, []uintptr{0, 1, 2, 7}},
		{"relay", 8, -1, []string{relay + "4"}, []uintptr{0, 1, 2, 7, 8}},
		{"tasks", -1, 9, []string{tasks + "4"}, []uintptr{0, 1, 2, 7, 9}},
		{"both", 8, 9, []string{relay + "4", tasks + "5"}, []uintptr{0, 1, 2, 7, 8, 9}},
	} {
		env, files := workerFiles(7, tc.relay, tc.tasks)
		if !slices.Equal(env, tc.wantEnv) || !slices.Equal(files, tc.wantFiles) {
			t.Errorf("%s: env %q, files %v; want %q, %v", tc.name, env, files, tc.wantEnv, tc.wantFiles)
		}
	}
	if runner.ControlFD != 3 {
		t.Errorf("the control channel is the worker's descriptor %d; workerFiles gives it 3", runner.ControlFD)
	}
}
