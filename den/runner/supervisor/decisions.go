package supervisor

import (
	"syscall"
	"time"
)

// What the supervisor's loop decides, as pure functions (decisions_test.go
// covers each with a table); supervisor.go does what they say.

// action is what the supervisor does with a signal it caught.
type action struct {
	reap    bool // collect the children that exited
	forward bool // pass the signal on to the worker
	armKill bool // start the timer after which the worker is killed
}

// signalAction decides what to do with sig: SIGCHLD reaps; any other
// signal goes on to the worker (a request to stop, or for live output),
// and the first request to stop (SIGTERM, SIGINT; killArmed false) arms
// the kill timer.
func signalAction(sig syscall.Signal, killArmed bool) action {
	if sig == syscall.SIGCHLD {
		return action{reap: true}
	}
	stop := sig == syscall.SIGTERM || sig == syscall.SIGINT
	return action{forward: true, armKill: stop && !killArmed}
}

// memoryTicks says whether the supervisor looks at the run's memory every
// memoryEvery: while the task has a memory request (limit, in bytes).
func memoryTicks(limit int64) bool { return limit > 0 }

// sampleDue says whether a tick, since after the last sample of the
// run's usage, takes another: once sampleEvery has nearly passed (a
// quarter early, as ticks come once a second).
func sampleDue(since time.Duration) bool { return since >= sampleEvery-sampleEvery/4 }

// workerEnd is how the worker ended, as far as the supervisor's exit
// says it.
type workerEnd int

const (
	// exited: on its own; its exit code is the supervisor's.
	exited workerEnd = iota
	// killedIdle: killed by a signal between tasks (no run to rescue).
	killedIdle
	// killedRunning: killed by a signal while it served a task, which
	// the node rescues.
	killedRunning
	// unknown: neither exited nor killed (a status wait4 does not give
	// for a reaped process).
	unknown
)

// exitOf decides the supervisor's exit code from its worker's wait
// status: the worker's code when it exited, 128 plus the signal when one
// killed it (idling: between tasks), else 1.
func exitOf(ws syscall.WaitStatus, idling bool) (int, workerEnd) {
	switch {
	case ws.Exited():
		return ws.ExitStatus(), exited
	case ws.Signaled() && idling:
		return 128 + int(ws.Signal()), killedIdle
	case ws.Signaled():
		return 128 + int(ws.Signal()), killedRunning
	}
	return 1, unknown
}
