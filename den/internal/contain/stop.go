package contain

import (
	"context"
	"syscall"
	"time"
)

// poll is how often Stop looks whether the processes are gone.
const poll = 50 * time.Millisecond

// killRounds bounds the SIGKILL rounds against processes that keep forking
// while they are being killed: a killed process cannot fork, so each round
// leaves only children born during it.
const killRounds = 100

// exitWait bounds how long Stop waits, after its SIGKILLs, for killed
// processes to finish exiting (a process in uninterruptible sleep exits
// only once its I/O is done).
const exitWait = 30 * time.Second

// Stop stops the processes that find returns: SIGTERM to each, then, once
// grace has passed with some still there, SIGKILL until none is. reap,
// when not nil, is called while waiting, for a caller that must reap its
// own children (a subreaper). It returns how many distinct processes were
// signalled. ctx bounds the whole; when it is done Stop sends SIGKILL at
// once.
//
// A process counts as gone only once it has exited (a zombie, or no
// longer there), whatever find says: a process that is exiting may
// already be missing from find's answer (its environment, where the run
// marker is, cannot be read once its memory is released) while it still
// exists. So every process Stop signalled, known by its pid and start time
// (pids are reused), is waited for too, and killed with the rest.
func Stop(ctx context.Context, find func() []int32, grace time.Duration, reap func()) int {
	signalled := map[int32]int64{} // pid: start time (stat field 22), -1 unknown
	send := func(pids []int32, sig syscall.Signal) {
		for _, pid := range pids {
			if pid <= 1 || pid == self {
				continue
			}
			start, known := signalled[pid]
			if !known {
				start = startTime(pid) // before the signal: after it, it may be gone
			}
			if syscall.Kill(int(pid), sig) == nil && !known {
				signalled[pid] = start
			}
		}
	}
	// remaining is what find returns, and every process signalled that has
	// not exited yet.
	remaining := func() []int32 {
		pids := find()
		for pid, start := range signalled {
			if !contains(pids, pid) && running(pid, start) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	pids := find()
	if len(pids) == 0 {
		return 0
	}
	send(pids, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
wait:
	for {
		select {
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-tick.C:
			if reap != nil {
				reap()
			}
			if pids = remaining(); len(pids) == 0 {
				return len(signalled)
			}
			var fresh []int32 // children born since: they get SIGTERM too, once
			for _, pid := range pids {
				if _, ok := signalled[pid]; !ok {
					fresh = append(fresh, pid)
				}
			}
			send(fresh, syscall.SIGTERM)
		}
	}
	for range killRounds {
		if pids = remaining(); len(pids) == 0 {
			return len(signalled)
		}
		send(pids, syscall.SIGKILL)
		time.Sleep(poll / 5)
		if reap != nil {
			reap()
		}
	}
	// Killed, but some may still be exiting.
	for until := time.Now().Add(exitWait); time.Now().Before(until) && ctx.Err() == nil; time.Sleep(poll / 5) {
		if reap != nil {
			reap()
		}
		if pids = remaining(); len(pids) == 0 {
			break
		}
		send(pids, syscall.SIGKILL)
	}
	return len(signalled)
}

func contains(pids []int32, pid int32) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

func startTime(pid int32) int64 {
	if st, ok := ReadStat(pid); ok {
		return st.Start
	}
	return -1
}

// running reports whether pid is still the process that started at start
// (-1: any) and has not exited: not a zombie, not dead.
func running(pid int32, start int64) bool {
	st, ok := ReadStat(pid)
	return ok && !st.Exited() && (start < 0 || st.Start == start)
}
