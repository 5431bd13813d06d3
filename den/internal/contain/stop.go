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

// Stop stops the processes that find returns: SIGTERM to each, then, once
// grace has passed with some still found, SIGKILL until find returns none.
// reap, when not nil, is called while waiting, for a caller that must reap
// its own children (a subreaper). It returns how many distinct processes
// were signalled. ctx bounds the whole; when it is done Stop sends SIGKILL
// at once.
func Stop(ctx context.Context, find func() []int32, grace time.Duration, reap func()) int {
	signalled := map[int32]bool{}
	send := func(pids []int32, sig syscall.Signal) {
		for _, pid := range pids {
			if pid <= 1 || pid == self {
				continue
			}
			if syscall.Kill(int(pid), sig) == nil {
				signalled[pid] = true
			}
		}
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
			if pids = find(); len(pids) == 0 {
				return len(signalled)
			}
			var fresh []int32 // children born since: they get SIGTERM too, once
			for _, pid := range pids {
				if !signalled[pid] {
					fresh = append(fresh, pid)
				}
			}
			send(fresh, syscall.SIGTERM)
		}
	}
	for range killRounds {
		if pids = find(); len(pids) == 0 {
			break
		}
		send(pids, syscall.SIGKILL)
		time.Sleep(poll / 5)
		if reap != nil {
			reap()
		}
	}
	return len(signalled)
}
