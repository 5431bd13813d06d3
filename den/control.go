package den

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
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
	live := map[bson.ObjectID]bool{}
	for _, doc := range tasks {
		id, ok := doc.Lookup("_id").ObjectIDOK()
		if !ok {
			continue
		}
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
		live[r.Token] = true
		if err := n.stopRunner(ctx, id, doc, r, queues, now); err != nil {
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
func (n *Node) stopRunner(ctx context.Context, id bson.ObjectID, doc bson.Raw, r queue.RunnerInfo, queues map[bson.ObjectID]queue.Queue, now time.Time) error {
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
		if isRunnerOf(r, id) {
			log.Info("task cancelled: stopping its runner (SIGTERM to its process group)", zap.Duration("grace", grace))
			syscall.Kill(-r.PID, syscall.SIGTERM)
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
		if isRunnerOf(r, id) {
			syscall.Kill(-r.PID, syscall.SIGKILL)
			log.Warn("cancelled task's runner did not stop in time: recorded -5 and sent SIGKILL to its process group")
		} else {
			log.Warn("cancelled task's runner did not record a result in time: recorded -5")
		}
		n.stopLeftovers(ctx, id, r, 0)
	}
	return nil
}

// onThisHost reports whether a runner runs on this machine: only then can
// the node signal it or tell whether it is alive.
func (n *Node) onThisHost(r queue.RunnerInfo) bool {
	host, _ := os.Hostname()
	return r.Host == host
}

// alive reports whether the runner process may still exist: a process with
// its pid exists, is not a zombie, and started when the runner did (a pid
// reused by another process does not count). When the start time could not
// be recorded, an existing process counts as alive: a false "dead" would
// run the task twice.
func alive(r queue.RunnerInfo) bool {
	if r.PID <= 1 || r.PID > math.MaxInt32 {
		return false
	}
	p, err := process.NewProcess(int32(r.PID))
	if err != nil {
		return false
	}
	if st, err := p.Status(); err == nil && len(st) > 0 && st[0] == process.Zombie {
		return false
	}
	if r.Started == 0 {
		return true
	}
	created, err := p.CreateTime()
	if err != nil {
		return true
	}
	diff := created - r.Started
	return diff > -1000 && diff < 1000
}

// isRunnerOf reports whether pid r.PID is, provably, the task runner of
// task id: alive as recorded, the leader of its own process group, and
// started by a node with that task in its spec. Anyone who can write to
// tasks can write a runner field; only a process that passes this check is
// ever signalled.
func isRunnerOf(r queue.RunnerInfo, id bson.ObjectID) bool {
	if !alive(r) || r.Started == 0 {
		return false
	}
	if pgid, err := syscall.Getpgid(r.PID); err != nil || pgid != r.PID {
		return false
	}
	p, err := process.NewProcess(int32(r.PID))
	if err != nil {
		return false
	}
	env, err := p.Environ()
	if err != nil {
		return false
	}
	for _, e := range env {
		if raw, ok := strings.CutPrefix(e, runner.SpecEnv+"="); ok {
			var spec runner.Spec
			return json.Unmarshal([]byte(raw), &spec) == nil && spec.Task == id.Hex()
		}
	}
	return false
}

// rescueDeadRunners rescues this node's running tasks whose runner process
// is gone, for example after the node itself was restarted. Live runners
// are left alone. A runner recorded on another host under this node's name
// (the node moved, as a container does) counts as gone once it has not
// beaten for dead_node_after.
func (n *Node) rescueDeadRunners(ctx context.Context, queues map[bson.ObjectID]queue.Queue) error {
	tasks, err := n.store.Mine(ctx, n.cfg.Name, false)
	if err != nil {
		return err
	}
	now := n.now()
	for _, doc := range tasks {
		st, _ := doc.Lookup("status").AsInt64OK()
		r, ok := queue.RunnerOf(doc)
		if st != queue.StatusRunning || !ok {
			continue
		}
		switch {
		case n.onThisHost(r) && !alive(r):
			n.rescueWith(ctx, doc, queueDoc(doc, queues), fmt.Sprintf("task runner (pid %d) is gone", r.PID))
		case !n.onThisHost(r) && now.Sub(r.LastSign()) > n.cfg.DeadNodeAfter:
			n.rescueWith(ctx, doc, queueDoc(doc, queues), fmt.Sprintf("task runner on host %s has not beaten since %s", r.Host, r.LastSign().Format(time.RFC3339)))
		}
	}
	return nil
}

// rescueDeadNodes rescues the claimed and running tasks of nodes that have
// not written their node document for DeadNodeAfter. A stopped node's
// runners keep working (KillMode=process), so a running task is rescued
// only when its runner has not beaten for DeadNodeAfter either. Several live
// nodes may do this at once: each task's rescue is conditional, so it
// happens once.
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
		counts := map[int]int{}
		for _, doc := range tasks {
			if r, ok := queue.RunnerOf(doc); ok && now.Sub(r.LastSign()) < n.cfg.DeadNodeAfter {
				continue // its runner is still at work
			}
			counts[n.rescueWith(ctx, doc, queueDoc(doc, queues), fmt.Sprintf("node %s stopped updating its node document (dead for %s)", name, n.cfg.DeadNodeAfter))]++
		}
		if done := counts[queue.StatusOrphaned] + counts[queue.StatusQueued] + counts[queue.StatusCancelled]; done > 0 {
			n.log.Warn("rescued the tasks of a dead node", zap.String("dead_node", name),
				zap.Int("orphaned", counts[queue.StatusOrphaned]), zap.Int("retried", counts[queue.StatusQueued]), zap.Int("cancelled", counts[queue.StatusCancelled]))
		}
	}
	return nil
}

// rescue rescues one task, reading its queue's settings.
func (n *Node) rescue(ctx context.Context, doc bson.Raw, reason string) int {
	qid, _ := doc.Lookup("queue").ObjectIDOK()
	qdoc, err := n.store.QueueDoc(ctx, qid)
	if err != nil {
		n.log.Warn("could not read a task's queue to rescue it; the periodic check will", zap.Error(err))
		return 0
	}
	return n.rescueWith(ctx, doc, qdoc, reason)
}

// queueDoc returns the document of a task's queue from the queues read
// this pass, or nil.
func queueDoc(task bson.Raw, queues map[bson.ObjectID]queue.Queue) bson.Raw {
	qid, _ := task.Lookup("queue").ObjectIDOK()
	return queues[qid].Raw
}

// rescueWith rescues one task with its queue's settings (qdoc may be nil)
// and returns the task's new status, or 0 when someone else got there
// first.
//
// A run on this host is stopped first: a runner that is alive but hung is
// killed with its group, then whatever the run left is stopped (see
// leftovers.go), so that a retry never overlaps it. The count goes into
// the task's history (leftover_processes).
func (n *Node) rescueWith(ctx context.Context, doc, qdoc bson.Raw, reason string) int {
	id, _ := doc.Lookup("_id").ObjectIDOK()
	leftovers := 0
	if r, ok := queue.RunnerOf(doc); ok && n.onThisHost(r) {
		n.killHungRunner(id, r)
		grace := queue.TaskOptions(doc, qdoc).MaxTermination
		if grace == 0 {
			grace = n.cfg.MaxTermination
		}
		var busy bool
		if leftovers, busy = n.stopLeftovers(ctx, id, r, grace); busy {
			return 0 // another pass is stopping this run, and rescues it after
		}
	}
	st, err := n.store.Rescue(ctx, doc, qdoc, reason, leftovers, n.now())
	switch {
	case err != nil:
		n.log.Warn("could not rescue a task", zap.String("task_id", id.Hex()), zap.Error(err))
	case st == queue.StatusOrphaned:
		n.log.Warn("task orphaned", zap.String("task_id", id.Hex()), zap.String("reason", reason))
	case st == queue.StatusQueued:
		n.log.Warn("task put back for a retry", zap.String("task_id", id.Hex()), zap.String("reason", reason))
	case st == queue.StatusCancelled:
		n.log.Info("cancelled task's runner is gone; recorded -5", zap.String("task_id", id.Hex()))
	}
	return st
}
