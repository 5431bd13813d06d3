package runners

import (
	"context"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// This file is how the pool signals runners: every act on
// the runner of a task (cancel, live output, kill) goes through act.

// What act does to the runner of a task.
type runnerAct int

const (
	actCancel runnerAct = iota // stop the task's run (SIGTERM to a runner's group)
	actLive                    // ask for live output (SIGUSR1 to the supervisor)
	actKill                    // SIGKILL to the runner's group
)

// act does what to the runner r of task id, if it is, provably, the
// runner that runs id now, and reports whether it did. A runner of this
// node process is told over its task channel (cancel, live) or signalled
// while the pool's lock holds it to id; any other runner is signalled only
// after isRunnerOf proves it.
func (rs *Pool) act(id bson.ObjectID, r queue.RunnerInfo, what runnerAct) bool {
	pool := rs.procs
	pool.mu.Lock()
	if p := pool.byPID[r.PID]; p != nil {
		defer pool.mu.Unlock()
		if p.task != id {
			return false // ours, but at another task or none
		}
		if p.ch != nil && p.ready && !p.closed {
			var err error
			switch what {
			case actCancel:
				err = runner.Send(p.ch, runner.CancelRun{Task: id.Hex()})
			case actLive:
				err = runner.Send(p.ch, runner.LiveOutput{Task: id.Hex()})
			default:
				return signal(p.pid, what)
			}
			if err == nil {
				return true
			}
			// A runner that does not read its channel serves no other
			// task; signals can reach only this one.
			rs.Log.Warn("a task runner does not read its task channel; retiring it and signalling it instead", zap.Int("pid", p.pid), zap.Error(err))
			p.retireLocked()
		}
		return signal(p.pid, what)
	}
	pool.mu.Unlock()
	if !isRunnerOf(r, id) {
		return false
	}
	return signal(r.PID, what)
}

// signal signals runner pid for what.
func signal(pid int, what runnerAct) bool {
	switch what {
	case actCancel:
		return syscall.Kill(-pid, syscall.SIGTERM) == nil
	case actLive:
		return syscall.Kill(pid, syscall.SIGUSR1) == nil
	default:
		return syscall.Kill(-pid, syscall.SIGKILL) == nil
	}
}

// stopCancelled stops the run of a running task whose cancel is set:
// SIGTERM to its runner's group once (a runner this node process started
// is told over its task channel), then SIGKILL once its grace time is
// over, recording -5 itself if the runner could not. Only a process proven
// to be this task's runner is signalled.
func (rs *Pool) StopCancelled(ctx context.Context, task queue.Task, q *queue.Queue, now time.Time) error {
	id, r := task.ID, *task.Runner
	log := rs.Log.With(zap.String("task_id", id.Hex()), zap.Int("pid", r.PID))
	rs.cancelMu.Lock()
	deadline, signalled := rs.cancelling[r.Token]
	rs.cancelMu.Unlock()
	if !signalled {
		grace := rs.grace(task, q)
		// The runner gives the work grace to stop, then kills it and records
		// the result; the node's own SIGKILL is only for a runner that hangs.
		deadline = now.Add(grace + 10*time.Second)
		rs.cancelMu.Lock()
		rs.cancelling[r.Token] = deadline
		rs.cancelMu.Unlock()
		if rs.act(id, r, actCancel) {
			rs.Metrics.Cancellations.WithLabelValues("running").Inc()
			log.Info("task cancelled: stopping its run", zap.Duration("grace", grace))
		}
		return nil
	}
	if now.Before(deadline) {
		return nil
	}
	ok, err := rs.Store.CancelRunning(ctx, id, rs.params.Name, r.Token, now)
	if err != nil {
		return err
	}
	if ok {
		if rs.act(id, r, actKill) {
			log.Warn("cancelled task's runner did not stop in time: recorded -5 and sent SIGKILL to its process group")
		} else {
			log.Warn("cancelled task's runner did not record a result in time and no longer runs it: recorded -5")
		}
		rs.stopLeftovers(ctx, id, r, 0)
	}
	return nil
}

// grace is how long a task's run gets between SIGTERM and SIGKILL.
func (rs *Pool) grace(task queue.Task, q *queue.Queue) time.Duration {
	if g := task.Options(q).MaxTermination; g > 0 {
		return g
	}
	return rs.params.MaxTermination
}

// killHungRunner kills a runner that is alive but has stopped beating, with
// its whole group, before its task is rescued. Only a process proven to be
// this task's runner is signalled.
func (rs *Pool) killHungRunner(id bson.ObjectID, r queue.RunnerInfo) {
	if rs.OnThisHost(r) && rs.act(id, r, actKill) {
		rs.Log.Warn("killed a task runner that stopped beating", zap.String("task_id", id.Hex()), zap.Int("pid", r.PID))
	}
}

// forgetCancelled forgets the cancelled runs whose tokens are not in live:
// they are over.
func (rs *Pool) ForgetCancelled(live map[bson.ObjectID]bool) {
	rs.cancelMu.Lock()
	for token := range rs.cancelling {
		if !live[token] {
			delete(rs.cancelling, token)
		}
	}
	rs.cancelMu.Unlock()
}

// endDeadRun stops a run on this host before its task is rescued: a runner
// that is alive but hung is killed with its group, then whatever the run
// left is stopped (stopLeftovers), so that a retry never overlaps
// it. It returns how many processes it stopped (the task's history keeps
// it as leftover_processes), and busy when another goroutine is stopping
// the same run: the task must then be left to it.
func (rs *Pool) EndDeadRun(ctx context.Context, task queue.Task, q *queue.Queue) (leftovers int, busy bool) {
	if r := task.Runner; r != nil && rs.OnThisHost(*r) {
		rs.killHungRunner(task.ID, *r)
		return rs.stopLeftovers(ctx, task.ID, *r, rs.grace(task, q))
	}
	return 0, false
}
