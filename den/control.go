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

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// This file holds task control beyond Disbatch 4: cancellation, and rescue
// of tasks whose runner or node died. None of it acts on a task that does
// not use den's optional fields, except rescue, which only turns tasks that
// would otherwise stay claimed or running forever into orphans (-6), as the
// protocol's reaping does.

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

// ownRunner reports whether pid is a runner this node process started and
// has not reaped: it is alive, and the pid cannot have been reused, so its
// recorded start time need not be compared (a process's apparent start
// time can move by a second or more with the boot time the kernel reports
// or a clock step, and a reused runner lives for many tasks).
func (n *Node) ownRunner(pid int) bool {
	n.pool.mu.Lock()
	defer n.pool.mu.Unlock()
	return n.pool.byPID[pid] != nil
}

// runGoing reports whether the live runner r may still be running run r
// of task id: a runner serves several tasks, and one whose run ended
// without its result recorded (its final write gave up) goes on to the
// next. (The caller leaves alone, for a minute, a task whose runner has
// just said it is done: the read showing it running may predate that.) A runner of this node process runs what the pool says; any other
// runner what its proof says (one without a proof, its one task).
// (Rescues are conditional on the run's token: a run that has just
// recorded its result is left as it is.)
func (n *Node) runGoing(id bson.ObjectID, r queue.RunnerInfo) bool {
	n.pool.mu.Lock()
	p := n.pool.byPID[r.PID]
	at := p != nil && p.task == id
	n.pool.mu.Unlock()
	if p != nil {
		return at
	}
	proves, held := contain.ProvesRun(r.PID, id.Hex(), r.Token.Hex())
	return proves || !held
}

// isRunnerOf reports whether pid r.PID is, provably, the task runner of
// task id: alive as recorded, the leader of its own process group, started
// as a den runner, and running that very run of id now: its supervisor
// holds the run's proof (contain.HoldProof), with the task id and the
// run's token. A runner of a den that predates proofs proves its one task
// by its spec. Anyone who can write to tasks can write a runner field;
// only a process that passes this check is ever signalled.
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
	var spec runner.Spec
	specFound, reusable := false, false
	for _, e := range env {
		if raw, ok := strings.CutPrefix(e, runner.SpecEnv+"="); ok {
			specFound = json.Unmarshal([]byte(raw), &spec) == nil
		}
		if v, ok := strings.CutPrefix(e, runner.EnvTasksFD+"="); ok && v != "" {
			reusable = true
		}
	}
	if !specFound {
		return false
	}
	if proves, held := contain.ProvesRun(r.PID, id.Hex(), r.Token.Hex()); held {
		return proves
	}
	// No proof: a runner started to serve one task (by a den before
	// proofs, or where the kernel has no memfd) proves it by its spec; one
	// started to serve several proves nothing.
	return !reusable && spec.Task == id.Hex()
}

// grace is how long a task's run gets between SIGTERM and SIGKILL.
func (n *Node) grace(task queue.Task, q *queue.Queue) time.Duration {
	if g := task.Options(q).MaxTermination; g > 0 {
		return g
	}
	return n.cfg.MaxTermination
}

// rescueDeadRunners rescues this node's running tasks whose runner process
// is gone, for example after the node itself was restarted. Live runners
// are left alone. A runner recorded on another host under this node's name
// (the node moved, as a container does) counts as gone once it has not
// beaten for dead_node_after. A task this node's name holds at 0 with no
// runner recorded was not started by a den runner (a writer set it by
// hand, or a node of another kind shares the name); it is rescued once
// its mtime is dead_node_after old, so that it cannot hold its queue's
// slot for ever.
func (n *Node) rescueDeadRunners(ctx context.Context, held []queue.Task, queues map[bson.ObjectID]queue.Queue) error {
	now := n.now()
	for _, task := range held {
		if task.Status != queue.StatusRunning {
			continue
		}
		r := task.Runner
		switch {
		case r == nil:
			if !task.Mtime.IsZero() && now.Sub(task.Mtime) <= n.cfg.DeadNodeAfter {
				continue
			}
			if !n.chore() {
				return nil
			}
			n.rescueWith(ctx, task, queueOf(task, queues), rescueDeadRunner, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("running (0) under node %s with no runner recorded for %s", n.cfg.Name, n.cfg.DeadNodeAfter)})
		case n.onThisHost(*r) && !n.ownRunner(r.PID) && !alive(*r):
			if !n.chore() {
				return nil
			}
			n.rescueWith(ctx, task, queueOf(task, queues), rescueDeadRunner, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("task runner (pid %d) is gone", r.PID)})
		case n.onThisHost(*r) && !n.runGoing(task.ID, *r) && !n.held.finished(task.ID):
			if !n.chore() {
				return nil
			}
			n.rescueWith(ctx, task, queueOf(task, queues), rescueDeadRunner, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("task runner (pid %d) is alive but no longer runs the task", r.PID)})
		case !n.onThisHost(*r) && staleSign(*r, now, n.cfg.DeadNodeAfter):
			if !n.chore() {
				return nil
			}
			n.rescueWith(ctx, task, queueOf(task, queues), rescueDeadRunner, queue.Outcome{Kind: queue.OutcomeRunnerDied, Reason: fmt.Sprintf("task runner on host %s has not beaten since %s", r.Host, r.LastSign().Format(time.RFC3339))})
		}
	}
	return nil
}

// rescueStaleClaims rescues this node's claims (among those it holds) that no runner
// took up within orphan_age: a retry when retries are left, else orphaned
// (-6).
func (n *Node) rescueStaleClaims(ctx context.Context, held []queue.Task, queues map[bson.ObjectID]queue.Queue, now time.Time) error {
	for _, task := range queue.StaleClaims(held, now.Add(-n.cfg.OrphanAge)) {
		if !n.chore() {
			return nil
		}
		n.rescueWith(ctx, task, queueOf(task, queues), rescueStaleClaim, queue.Outcome{Kind: queue.OutcomeNodeDied, Reason: fmt.Sprintf("claimed by node %s but never started by a runner within orphan_age (%s)", n.cfg.Name, n.cfg.OrphanAge)})
	}
	return nil
}

// rescueDeadNodes rescues the claimed and running tasks of nodes that have
// not written their node document for DeadNodeAfter, and of node names
// that have no node document at all (a writer's typo, a node of another
// kind, a document deleted by hand) once the task's mtime is that old. A
// stopped node's runners keep working (KillMode=process), so a running task
// is rescued only when its runner has not beaten for DeadNodeAfter either.
// Several live nodes may do this at once: each task's rescue is
// conditional, so it happens once.
func (n *Node) rescueDeadNodes(ctx context.Context, queues map[bson.ObjectID]queue.Queue) error {
	now := n.now()
	seen, offers, err := n.store.NodesSeenOffers(ctx)
	if err != nil {
		return err
	}
	n.noteOffers(seen, offers, now)
	holders, err := n.store.ClaimingNodes(ctx)
	if err != nil {
		return err
	}
	for _, holder := range holders {
		name, isName := holder.StringValueOK()
		if isName && name == n.cfg.Name {
			continue
		}
		last, known := seen[name]
		if isName && known && now.Sub(last) <= n.cfg.DeadNodeAfter {
			continue // alive
		}
		label := name
		if !isName {
			label = holder.String()
		}
		why := fmt.Sprintf("node %s stopped updating its node document (dead for %s)", label, n.cfg.DeadNodeAfter)
		if !isName || !known {
			why = fmt.Sprintf("claimed under node %s, which has no node document", label)
		}
		tasks, err := n.store.NodeTasks(ctx, holder)
		if err != nil {
			return err
		}
		counts := map[int]int{}
		for _, task := range tasks {
			if r := task.Runner; r != nil && !staleSign(*r, now, n.cfg.DeadNodeAfter) {
				continue // its runner is still at work
			}
			if (!isName || !known) && !task.Mtime.IsZero() && now.Sub(task.Mtime) <= n.cfg.DeadNodeAfter {
				continue // give a node that has just started time to write its document
			}
			if !n.chore() {
				break
			}
			counts[n.rescueWith(ctx, task, queueOf(task, queues), rescueDeadNode, queue.Outcome{Kind: queue.OutcomeNodeDied, Reason: why})]++
		}
		if done := counts[queue.StatusOrphaned] + counts[queue.StatusQueued] + counts[queue.StatusCancelled]; done > 0 {
			n.log.Warn("rescued the tasks of a dead or unknown node", zap.String("dead_node", label), zap.String("why", why),
				zap.Int("orphaned", counts[queue.StatusOrphaned]), zap.Int("retried", counts[queue.StatusQueued]), zap.Int("cancelled", counts[queue.StatusCancelled]))
		}
		if n.chores <= 0 {
			return nil // the rest next pass
		}
	}
	return nil
}

// Why a task was rescued, for den_rescues_total.
const (
	rescueDeadRunner = "dead_runner"
	rescueDeadNode   = "dead_node"
	rescueStaleClaim = "stale_claim"
)

// rescue rescues one task whose runner died, reading its queue's settings.
func (n *Node) rescue(ctx context.Context, task queue.Task, why queue.Outcome) int {
	q, err := n.store.QueueDoc(ctx, task.Queue)
	if err != nil {
		n.log.Warn("could not read a task's queue to rescue it; the periodic check will", zap.Error(err))
		return 0
	}
	return n.rescueWith(ctx, task, q, rescueDeadRunner, why)
}

// queueOf returns a task's queue from the queues read this pass, or nil.
func queueOf(task queue.Task, queues map[bson.ObjectID]queue.Queue) *queue.Queue {
	if q, ok := queues[task.Queue]; ok {
		return &q
	}
	return nil
}

// rescueWith rescues one task with its queue's settings (q may be nil)
// and returns the task's new status, or 0 when someone else got there
// first.
//
// A run on this host is stopped first: a runner that is alive but hung is
// killed with its group, then whatever the run left is stopped (see
// leftovers.go), so that a retry never overlaps it. The count goes into
// the task's history (leftover_processes).
func (n *Node) rescueWith(ctx context.Context, task queue.Task, q *queue.Queue, kind string, why queue.Outcome) int {
	reason := why.Reason
	id := task.ID
	leftovers := 0
	if r := task.Runner; r != nil && n.onThisHost(*r) {
		n.killHungRunner(id, *r)
		var busy bool
		if leftovers, busy = n.stopLeftovers(ctx, id, *r, n.grace(task, q)); busy {
			return 0 // another pass is stopping this run, and rescues it after
		}
	}
	st, err := n.store.Rescue(ctx, task, q, why, leftovers, n.now())
	if err == nil && st != 0 {
		n.metrics.Rescues.WithLabelValues(kind).Inc()
	}
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

// staleSign reports whether runner r has given no sign of life (a beat,
// else its start) for longer than after. A sign further in the future than
// after is no sign: no runner wrote it (a writer put a far date there), and
// taking it at its word would let one document hold a slot for ever.
func staleSign(r queue.RunnerInfo, now time.Time, after time.Duration) bool {
	age := now.Sub(r.LastSign())
	return age > after || age < -after
}
