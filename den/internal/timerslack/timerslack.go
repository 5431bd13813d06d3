package timerslack

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Slack is the timer slack of den's node and runner processes.
const Slack = time.Millisecond

// EnvOriginal holds the timer slack, in nanoseconds, that the node was
// started with before Reexec raised it: what the tasks' programs get.
const EnvOriginal = "DEN_TIMER_SLACK_NS"

// Reexec makes this process run with Slack. If its timer slack is below
// Slack and it has not done so already (EnvOriginal is unset), it records
// its slack in EnvOriginal, sets Slack on the calling thread and executes
// itself again (the file it was started from), with the same arguments
// and environment: the new image's threads all inherit it. It returns only when there was nothing to do, or
// with the reason the process keeps running as it is.
func Reexec() error {
	if _, set := os.LookupEnv(EnvOriginal); set {
		return nil
	}
	// prctl and execve act on the calling thread: the same one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	current, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("read the timer slack: %w", err)
	}
	if time.Duration(current) >= Slack {
		return nil
	}
	// The binary's own path, not /proc/self/exe: the process's name
	// (ps, top, systemctl status) is the file's.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	env := append(os.Environ(), EnvOriginal+"="+strconv.Itoa(current))
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(Slack.Nanoseconds()), 0, 0, 0); err != nil {
		return fmt.Errorf("set the timer slack to %s: %w", Slack, err)
	}
	err = syscall.Exec(exe, os.Args, env)
	// Still this image: its other threads keep the old slack, and so
	// should this one.
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(current), 0, 0, 0)
	return fmt.Errorf("execute %s again with a timer slack of %s: %w", exe, Slack, err)
}

// Original returns the timer slack the node was started with, in
// nanoseconds, when Reexec raised it (EnvOriginal); false when it did not.
func Original() (int64, bool) {
	v, set := os.LookupEnv(EnvOriginal)
	if !set {
		return 0, false
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return 0, false
	}
	return ns, true
}

// Restore sets the calling thread's timer slack to ns, for a program this
// thread executes next. The caller locks the thread.
func Restore(ns int64) error {
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0); err != nil {
		return fmt.Errorf("set the timer slack to %d ns: %w", ns, err)
	}
	return nil
}
