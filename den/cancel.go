package den

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// This file carries out cancellation (cancel: true, den's optional field):
// a claimed task becomes -5 without running, a running one is stopped.

// cancel carries out cancel: true on this node's tasks (held, as this pass
// read them): claimed ones become -5 without running; for running ones,
// the run is stopped (see act: a runner this node process started is told
// over its task channel, any other's process group gets SIGTERM), and its
// runner's group gets SIGKILL after the task's max_termination_time if it
// has not recorded a result by then. (Queued
// tasks with cancel set are never claimed; the sweep records their -5.)
func (n *Node) cancel(ctx context.Context, held []queue.Task, queues map[bson.ObjectID]queue.Queue) error {
	now := n.now()
	live := map[bson.ObjectID]bool{}
	for _, task := range held {
		if !task.Cancel {
			continue
		}
		if task.Status == queue.StatusClaimed {
			if ok, err := n.store.CancelUnstarted(ctx, task.ID, n.cfg.Name, now); err != nil {
				return err
			} else if ok {
				n.metrics.Cancellations.WithLabelValues("claimed").Inc()
				n.log.Info("cancelled a claimed task before its runner started it", zap.String("task_id", task.ID.Hex()))
			}
			continue
		}
		r := task.Runner
		if r == nil || !n.onThisHost(*r) {
			continue
		}
		live[r.Token] = true
		if err := n.stopRunner(ctx, task, queueOf(task, queues), now); err != nil {
			return err
		}
	}
	// Forget runs that are over.
	n.cancelMu.Lock()
	for token := range n.cancelling {
		if !live[token] {
			delete(n.cancelling, token)
		}
	}
	n.cancelMu.Unlock()
	return nil
}

// stopRunner sends SIGTERM to a cancelled task's runner group once, then
// SIGKILL once its grace time is over, recording -5 itself if the runner
// could not. Only a process proven to be this task's runner is signalled.
func (n *Node) stopRunner(ctx context.Context, task queue.Task, q *queue.Queue, now time.Time) error {
	id, r := task.ID, *task.Runner
	log := n.log.With(zap.String("task_id", id.Hex()), zap.Int("pid", r.PID))
	n.cancelMu.Lock()
	deadline, signalled := n.cancelling[r.Token]
	n.cancelMu.Unlock()
	if !signalled {
		grace := n.grace(task, q)
		// The runner gives the work grace to stop, then kills it and records
		// the result; the node's own SIGKILL is only for a runner that hangs.
		deadline = now.Add(grace + 10*time.Second)
		n.cancelMu.Lock()
		n.cancelling[r.Token] = deadline
		n.cancelMu.Unlock()
		if n.act(id, r, actCancel) {
			n.metrics.Cancellations.WithLabelValues("running").Inc()
			log.Info("task cancelled: stopping its run", zap.Duration("grace", grace))
		}
		return nil
	}
	if now.Before(deadline) {
		return nil
	}
	ok, err := n.store.CancelRunning(ctx, id, n.cfg.Name, r.Token, now)
	if err != nil {
		return err
	}
	if ok {
		if n.act(id, r, actKill) {
			log.Warn("cancelled task's runner did not stop in time: recorded -5 and sent SIGKILL to its process group")
		} else {
			log.Warn("cancelled task's runner did not record a result in time and no longer runs it: recorded -5")
		}
		n.stopLeftovers(ctx, id, r, 0)
	}
	return nil
}

// grace is how long a task's run gets between SIGTERM and SIGKILL.
func (n *Node) grace(task queue.Task, q *queue.Queue) time.Duration {
	if g := task.Options(q).MaxTermination; g > 0 {
		return g
	}
	return n.cfg.MaxTermination
}
