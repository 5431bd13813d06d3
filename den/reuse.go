package den

import (
	"os"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// This file keeps the task runners this node process started, and hands
// an idle one the next task claimed from its queue, so that a busy queue
// does not start two processes per task (see den/runner/worker_tasks.go for the
// runner's side, and Config.Runner.MaxTasks and Idle).
//
// Each runner is one of this node's: the node knows, under one lock, which
// task each runs. Every act on a runner of a task (cancel, live output,
// SIGKILL) goes through act, which acts only on the runner that runs that
// task now, so that nothing meant for a task can reach the next task of
// the same runner. Runners of an earlier node process are not in the pool:
// their task channel closed with that process, so they take no other
// task, and act signals them after proving them (isRunnerOf).

// DefaultRunnerMaxTasks, DefaultRunnerIdle and DefaultRunnerMaxProcesses
// are the defaults of RunnerCommand's MaxTasks, Idle and MaxProcesses.
const (
	DefaultRunnerMaxTasks     = 100
	DefaultRunnerIdle         = 10 * time.Second
	DefaultRunnerMaxProcesses = 1024
)

// runnerProc is one runner process (its supervisor) this node started.
type runnerProc struct {
	pid   int
	queue bson.ObjectID
	ch    *os.File      // the node's end of its task channel; nil: one task only
	ready bool          // the runner said it serves ch
	task  bson.ObjectID // the task it runs; zero between tasks
	// served counts the tasks handed to it; idleAt is when it last became
	// idle; closed is set once ch is closed (it takes no more tasks).
	served int
	idleAt time.Time
	closed bool
}

// runnerPool is the node's runner processes, by pid, and the idle ones by
// queue (the most recently idle last).
type runnerPool struct {
	mu      sync.Mutex
	byPID   map[int]*runnerProc
	idle    map[bson.ObjectID][]*runnerProc
	stopped bool // the node stops: no more hand-overs
}

func newRunnerPool() *runnerPool {
	return &runnerPool{byPID: map[int]*runnerProc{}, idle: map[bson.ObjectID][]*runnerProc{}}
}

// retireLocked closes p's task channel: it takes no more tasks and exits
// once it has none.
func (p *runnerProc) retireLocked() {
	if p.ch != nil && !p.closed {
		p.closed = true
		p.ch.Close()
	}
}

// removeIdleLocked takes p off its queue's idle list.
func (pool *runnerPool) removeIdleLocked(p *runnerProc) {
	list := pool.idle[p.queue]
	for i, q := range list {
		if q == p {
			pool.idle[p.queue] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(pool.idle[p.queue]) == 0 {
		delete(pool.idle, p.queue)
	}
}

// handOver gives task to an idle runner of its queue, and reports whether
// one took it. A runner whose channel fails is retired and the next tried.
func (n *Node) handOver(queueID, task bson.ObjectID, spec runner.Spec) bool {
	pool := n.pool
	pool.mu.Lock()
	defer pool.mu.Unlock()
	for !pool.stopped {
		list := pool.idle[queueID]
		if len(list) == 0 {
			return false
		}
		p := list[len(list)-1] // the warmest
		pool.removeIdleLocked(p)
		if err := runner.Send(p.ch, runner.RunTask{Spec: spec}); err != nil {
			n.log.Debug("an idle task runner cannot take a task; retiring it", zap.Int("pid", p.pid), zap.Error(err))
			p.retireLocked()
			continue
		}
		p.task = task
		p.served++
		n.metrics.RunnerReuses.Inc()
		n.log.Debug("task handed to an idle runner", zap.String("task_id", task.Hex()), zap.Int("pid", p.pid), zap.Int("served", p.served))
		return true
	}
	return false
}

// listen takes what runner p says on its task channel until the channel
// closes: each report goes to report, and each "done" frees its task's
// slot and makes p idle (or retires it, after MaxTasks tasks or once the
// node stops).
func (n *Node) listen(p *runnerProc, report func(runner.Report)) {
	runner.Listen(p.ch, runner.Listener{Report: report, Ready: func() {
		n.pool.mu.Lock()
		p.ready = true
		n.pool.mu.Unlock()
	}, Done: func(task string) {
		id, err := bson.ObjectIDFromHex(task)
		if err != nil {
			return
		}
		n.pool.mu.Lock()
		if p.task != id {
			n.pool.mu.Unlock()
			return
		}
		p.task = bson.ObjectID{}
		if p.served >= n.cfg.Runner.MaxTasks || n.pool.stopped || p.closed {
			p.retireLocked()
		} else {
			p.idleAt = n.now()
			n.pool.idle[p.queue] = append(n.pool.idle[p.queue], p)
		}
		n.pool.mu.Unlock()
		n.runnerFinished(id)
	}})
}

// runnerFinished lets go of a task whose run is over (its result recorded
// and its processes stopped) and claims at once in its slot.
func (n *Node) runnerFinished(id bson.ObjectID) {
	n.held.done(id, n.now())
	n.startFailures.Store(0)
	if n.notes.clear("runner-start") {
		n.log.Info("task runners start tasks again")
	}
	n.wakeUp()
}

// retireIdle retires the runners idle for longer than Runner.Idle, or all
// idle ones (and stops hand-overs) once the node stops.
func (n *Node) retireIdle(stopping bool) {
	pool := n.pool
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if stopping {
		pool.stopped = true
	}
	now := n.now()
	for _, list := range pool.idle {
		for _, p := range list {
			if stopping || now.Sub(p.idleAt) >= n.cfg.Runner.Idle {
				p.retireLocked()
				pool.removeIdleLocked(p)
			}
		}
	}
}

// pids lists the runner processes this node started that have not exited.
func (pool *runnerPool) pids() []int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	out := make([]int, 0, len(pool.byPID))
	for pid := range pool.byPID {
		out = append(out, pid)
	}
	return out
}

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
func (n *Node) act(id bson.ObjectID, r queue.RunnerInfo, what runnerAct) bool {
	pool := n.pool
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
			n.log.Warn("a task runner does not read its task channel; retiring it and signalling it instead", zap.Int("pid", p.pid), zap.Error(err))
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
