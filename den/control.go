package den

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// This file holds task control beyond Disbatch 4: cancellation, and rescue
// of tasks whose runner or node died. None of it acts on a task that does
// not use den's optional fields, except rescue, which only turns tasks that
// would otherwise stay claimed or running forever into orphans (-6), as the
// protocol's reaping does.

// cancel carries out cancel: true on tasks: queued ones (any node's) become
// -5 without running; this node's claimed ones too; for this node's running
// ones, the runner's process group gets SIGTERM, and SIGKILL after the
// task's max_termination_time if it has not recorded a result by then.
func (n *Node) cancel(ctx context.Context, queues map[bson.ObjectID]queue.Queue) error {
	now := n.now()
	if c, err := n.store.CancelQueued(ctx, now); err != nil {
		return err
	} else if c > 0 {
		n.log.Info("cancelled queued tasks", zap.Int64("count", c))
	}
	tasks, err := n.store.Mine(ctx, n.cfg.Name, true)
	if err != nil {
		return err
	}
	for _, doc := range tasks {
		id := doc.Lookup("_id").ObjectID()
		st, _ := doc.Lookup("status").AsInt64OK()
		if st == queue.StatusClaimed {
			if ok, err := n.store.CancelUnstarted(ctx, id, n.cfg.Name, now); err != nil {
				return err
			} else if ok {
				n.log.Info("cancelled a claimed task before its runner started it", zap.String("task_id", id.Hex()))
			}
			continue
		}
		r, ok := queue.RunnerOf(doc)
		if !ok || !n.onThisHost(r) {
			continue
		}
		n.stopRunner(ctx, doc, r, queues, now)
	}
	return nil
}

// stopRunner sends SIGTERM to a cancelled task's runner group once, then
// SIGKILL once its grace time is over, recording -5 itself if the runner
// could not.
func (n *Node) stopRunner(ctx context.Context, doc bson.Raw, r queue.RunnerInfo, queues map[bson.ObjectID]queue.Queue, now time.Time) {
	id := doc.Lookup("_id").ObjectID()
	log := n.log.With(zap.String("task_id", id.Hex()), zap.Int("pid", r.PID))
	n.cancelMu.Lock()
	deadline, signalled := n.cancelling[r.Token]
	n.cancelMu.Unlock()
	if !signalled {
		qid, _ := doc.Lookup("queue").ObjectIDOK()
		grace := queue.TaskOptions(doc, queues[qid].Raw).MaxTermination
		if grace == 0 {
			grace = n.cfg.MaxTermination
		}
		// The runner gives the work grace to stop, then kills it and records
		// the result; the node's own SIGKILL is only for a runner that hangs.
		deadline = now.Add(grace + 10*time.Second)
		n.cancelMu.Lock()
		n.cancelling[r.Token] = deadline
		n.cancelMu.Unlock()
		if alive(r) {
			log.Info("task cancelled: stopping its runner (SIGTERM to its process group)", zap.Duration("grace", grace))
			syscall.Kill(-r.PID, syscall.SIGTERM)
		}
		return
	}
	if now.Before(deadline) {
		return
	}
	if alive(r) {
		log.Warn("cancelled task's runner did not stop in time: SIGKILL to its process group")
		syscall.Kill(-r.PID, syscall.SIGKILL)
	}
	if ok, err := n.store.CancelRunning(ctx, id, n.cfg.Name, r.Token, now); err == nil && ok {
		log.Info("cancelled task recorded as -5 by the node")
	}
	n.cancelMu.Lock()
	delete(n.cancelling, r.Token)
	n.cancelMu.Unlock()
}

// onThisHost reports whether a runner runs on this machine: only then can
// the node signal it or tell whether it is alive. A pid of 0 or 1 is never
// a runner: signalling -0 would hit the node's own process group, and -1
// every process.
func (n *Node) onThisHost(r queue.RunnerInfo) bool {
	host, _ := os.Hostname()
	return r.Host == host && r.PID > 1
}

// alive reports whether the runner process still exists: a process with
// its pid exists, is not a zombie, and started when the runner did (a pid
// reused by another process does not count).
func alive(r queue.RunnerInfo) bool {
	p, err := process.NewProcess(int32(r.PID))
	if err != nil {
		return false
	}
	if st, err := p.Status(); err == nil && len(st) > 0 && st[0] == process.Zombie {
		return false
	}
	created, err := p.CreateTime()
	if err != nil {
		return false
	}
	diff := created - r.Started
	return diff > -1000 && diff < 1000
}

// rescueDeadRunners rescues this node's running tasks whose runner process
// is gone, for example after the node itself was restarted. Live runners
// are left alone.
func (n *Node) rescueDeadRunners(ctx context.Context, queues map[bson.ObjectID]queue.Queue) error {
	tasks, err := n.store.Mine(ctx, n.cfg.Name, false)
	if err != nil {
		return err
	}
	for _, doc := range tasks {
		st, _ := doc.Lookup("status").AsInt64OK()
		r, ok := queue.RunnerOf(doc)
		if st != queue.StatusRunning || !ok || !n.onThisHost(r) || alive(r) {
			continue
		}
		n.rescueWith(ctx, doc, queues, fmt.Sprintf("task runner (pid %d) is gone", r.PID))
	}
	return nil
}

// rescueDeadNodes rescues the claimed and running tasks of nodes that have
// not written their node document for DeadNodeAfter. Several live nodes may
// do this at once: each task's rescue is conditional, so it happens once.
func (n *Node) rescueDeadNodes(ctx context.Context, queues map[bson.ObjectID]queue.Queue) error {
	now := n.now()
	dead, err := n.store.DeadNodes(ctx, n.cfg.Name, now.Add(-n.cfg.DeadNodeAfter))
	if err != nil {
		return err
	}
	for _, name := range dead {
		tasks, err := n.store.NodeTasks(ctx, name)
		if err != nil {
			return err
		}
		rescued, retried := 0, 0
		for _, doc := range tasks {
			switch n.rescueWith(ctx, doc, queues, fmt.Sprintf("node %s stopped updating its node document (dead for %s)", name, n.cfg.DeadNodeAfter)) {
			case queue.StatusOrphaned:
				rescued++
			case queue.StatusQueued:
				retried++
			}
		}
		if rescued+retried > 0 {
			n.log.Warn("rescued the tasks of a dead node", zap.String("dead_node", name), zap.Int("orphaned", rescued), zap.Int("retried", retried))
		}
	}
	return nil
}

// rescue rescues one task, reading its queue's settings.
func (n *Node) rescue(ctx context.Context, doc bson.Raw, reason string) int {
	var qdoc bson.Raw
	if qid, ok := doc.Lookup("queue").ObjectIDOK(); ok {
		qdoc, _ = n.store.QueueDoc(ctx, qid)
	}
	return n.rescueWith(ctx, doc, map[bson.ObjectID]queue.Queue{doc.Lookup("queue").ObjectID(): {Raw: qdoc}}, reason)
}

func (n *Node) rescueWith(ctx context.Context, doc bson.Raw, queues map[bson.ObjectID]queue.Queue, reason string) int {
	qid, _ := doc.Lookup("queue").ObjectIDOK()
	st, err := n.store.Rescue(ctx, doc, queues[qid].Raw, reason, n.now())
	id := doc.Lookup("_id").ObjectID()
	switch {
	case err != nil:
		n.log.Warn("could not rescue a task", zap.String("task_id", id.Hex()), zap.Error(err))
	case st == queue.StatusOrphaned:
		n.log.Warn("task orphaned", zap.String("task_id", id.Hex()), zap.String("reason", reason))
	case st == queue.StatusQueued:
		n.log.Warn("task put back for a retry", zap.String("task_id", id.Hex()), zap.String("reason", reason))
	}
	return st
}
