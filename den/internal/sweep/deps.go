package sweep

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// maxBlocked bounds how many waiting tasks one sweep looks at; the next
// sweep goes on.
const maxBlocked = 1000

// sweepDependencies keeps the tasks of the served queues that come after
// others (queue/deps.go) moving: it registers new ones, fails those whose
// after cannot be (not ids, a missing or the same task, changed since, a
// cycle), cancels those that come after a task that ended badly, releases
// those whose dependencies all succeeded, and so repairs whatever a node
// that crashed half way through a release left. A runner whose task has
// dependents releases them at once (den/runner); this is the net under it,
// and the way for tasks that end elsewhere (a Perl node, a rescue, a cancel).
// With no such task it costs one find.
func (sw *Sweeper) sweepDependencies(ctx context.Context, queueIDs []bson.ObjectID, now time.Time) error {
	blocked, err := sw.Store.BlockedTasks(ctx, queueIDs, maxBlocked)
	if err != nil || len(blocked) == 0 {
		return err
	}
	var ids []bson.ObjectID
	for _, b := range blocked {
		ids = append(ids, b.After...)
	}
	statuses, err := sw.Store.Statuses(ctx, ids)
	if err != nil {
		return err
	}
	d := &depSweep{sw: sw, now: now, failed: map[bson.ObjectID]string{}, settled: map[bson.ObjectID]bool{}, waitingFor: map[bson.ObjectID][]bson.ObjectID{}}
	for _, b := range blocked {
		if err := d.check(ctx, b, statuses); err != nil {
			return err
		}
	}
	released, cancelled, err := sw.Store.SettleDependents(ctx, d.ended, now)
	if len(cancelled) > 0 {
		sw.Log.Info("cancelled tasks that come after one that cannot succeed", zap.Int("count", len(cancelled)))
	}
	if released > 0 {
		sw.Log.Info("queued tasks whose dependencies succeeded", zap.Int64("count", released))
		sw.Claims.WakeUp()
	}
	if err != nil {
		return err
	}
	return d.finish(ctx, blocked)
}

// depSweep is one sweep of dependencies (sweepDependencies) under way.
type depSweep struct {
	sw  *Sweeper
	now time.Time
	// failed are the tasks this sweep failed, with why: what comes after
	// a task failed here can never run either; it is cancelled once all
	// failures are recorded.
	failed map[bson.ObjectID]string
	// ended are the tasks that ended (succeeded or badly) that blocked
	// tasks come after, once each (settled).
	ended   []queue.EndedTask
	settled map[bson.ObjectID]bool
	// waitingFor are the registered tasks still blocked, by what they
	// wait for (a cycle among them fails them).
	waitingFor map[bson.ObjectID][]bson.ObjectID
}

// fail fails blocked task b with reason in its stderr.
func (d *depSweep) fail(ctx context.Context, b queue.Blocked, reason string) error {
	ok, err := d.sw.Store.FailBlocked(ctx, b, reason, d.now)
	if err != nil || !ok {
		return err
	}
	d.sw.Log.Warn("failed a task whose dependencies cannot be (reason in its stderr)", zap.String("task_id", b.ID.Hex()), zap.String("reason", reason))
	d.failed[b.ID] = reason
	return d.sw.Store.DecrementTodo(ctx, b.Queue)
}

// check deals with blocked task b, given the statuses of the tasks the
// blocked tasks come after: it fails b when its after cannot be, else
// registers it if it is new, and notes what it waits for.
func (d *depSweep) check(ctx context.Context, b queue.Blocked, statuses map[bson.ObjectID]int) error {
	if problem := blockedProblem(b); problem != "" {
		return d.fail(ctx, b, problem)
	}
	after := sortAfter(b.After, statuses)
	for _, e := range after.ended {
		if !d.settled[e.ID] {
			d.settled[e.ID] = true
			d.ended = append(d.ended, e)
		}
	}
	switch {
	case len(after.missing) > 0:
		return d.fail(ctx, b, fmt.Sprintf("after names %s, which do(es) not exist", hexes(after.missing)))
	case !b.Registered:
		// Registered as it is now; a dependency that ended badly is
		// dealt with below, once it waits for it.
		waiting := after.waiting
		for _, id := range b.After {
			if queue.EndedBadly(statuses[id]) {
				waiting = append(waiting, id)
			}
		}
		ok, err := d.sw.Store.MarkWaiting(ctx, b, waiting)
		if err != nil || !ok {
			return err
		}
		if err := d.sw.Store.MarkDependents(ctx, waiting); err != nil {
			return err
		}
		b.Waiting = waiting
	}
	if after.endedBadly {
		return nil // cancelled with the others (SettleDependents)
	}
	if len(b.Waiting) > 0 {
		d.waitingFor[b.ID] = b.Waiting
	}
	return nil
}

// finish fails the tasks of blocked whose dependencies form a cycle, and
// cancels what comes after each task this sweep failed.
func (d *depSweep) finish(ctx context.Context, blocked []queue.Blocked) error {
	for _, cycle := range cycles(d.waitingFor) {
		reason := "its dependencies form a cycle: " + strings.Join(hexList(cycle), " after ")
		for _, id := range cycle[:len(cycle)-1] {
			for _, b := range blocked {
				if b.ID == id {
					b.Status = queue.StatusBlocked
					if err := d.fail(ctx, b, reason); err != nil {
						return err
					}
				}
			}
		}
	}
	for id, reason := range d.failed {
		if _, err := d.sw.cancelDependents(ctx, []bson.ObjectID{id}, fmt.Sprintf("task %s, which it comes after, failed: %s", id.Hex(), reason), d.now); err != nil {
			return err
		}
	}
	return nil
}

// blockedProblem is why blocked task b can never be released, by its own
// fields alone; empty when nothing is wrong with them.
func blockedProblem(b queue.Blocked) string {
	switch {
	case b.Problem != "":
		return b.Problem
	case len(b.After) == 0:
		return "after is empty; list the ids of the tasks it comes after"
	case slices.Contains(b.After, b.ID):
		return "after names the task itself"
	case b.Registered && !sameIDs(b.After, b.AfterWas):
		return fmt.Sprintf("after was changed to %s after den registered it as %s; dependencies can only be given when a task is created",
			hexes(b.After), hexes(b.AfterWas))
	}
	return ""
}

// afterStates are the tasks a blocked task comes after, by what became
// of them.
type afterStates struct {
	// missing do not exist; waiting have not ended; ended have (succeeded
	// or badly), with their status, in after's order; endedBadly is set
	// when one of them ended badly.
	missing, waiting []bson.ObjectID
	ended            []queue.EndedTask
	endedBadly       bool
}

// sortAfter sorts the tasks of after by their statuses (none: missing).
func sortAfter(after []bson.ObjectID, statuses map[bson.ObjectID]int) afterStates {
	var s afterStates
	for _, id := range after {
		st, ok := statuses[id]
		switch {
		case !ok:
			s.missing = append(s.missing, id)
		case queue.EndedBadly(st):
			s.endedBadly = true
			s.ended = append(s.ended, queue.EndedTask{ID: id, Status: st})
		case st == queue.StatusSucceeded:
			s.ended = append(s.ended, queue.EndedTask{ID: id, Status: st})
		default:
			s.waiting = append(s.waiting, id)
		}
	}
	return s
}

// cancelDependents cancels what comes after ids, transitively, and logs it.
func (sw *Sweeper) cancelDependents(ctx context.Context, ids []bson.ObjectID, why string, now time.Time) ([]bson.ObjectID, error) {
	cancelled, err := sw.Store.CancelDependents(ctx, ids, why, now)
	if len(cancelled) > 0 {
		sw.Log.Info("cancelled tasks that come after one that cannot succeed", zap.Int("count", len(cancelled)), zap.String("why", why))
	}
	return cancelled, err
}

// cycles returns the cycles of the graph task -> tasks it waits for, each
// as the path that closes it (first id repeated last).
func cycles(edges map[bson.ObjectID][]bson.ObjectID) [][]bson.ObjectID {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[bson.ObjectID]int{}
	var out [][]bson.ObjectID
	var path []bson.ObjectID
	var visit func(id bson.ObjectID)
	visit = func(id bson.ObjectID) {
		state[id] = onPath
		path = append(path, id)
		for _, next := range edges[id] {
			switch state[next] {
			case unseen:
				if _, blocked := edges[next]; blocked {
					visit(next)
				}
			case onPath:
				i := slices.Index(path, next)
				out = append(out, append(slices.Clone(path[i:]), next))
			}
		}
		path = path[:len(path)-1]
		state[id] = done
	}
	keys := make([]bson.ObjectID, 0, len(edges))
	for id := range edges {
		keys = append(keys, id)
	}
	slices.SortFunc(keys, func(a, b bson.ObjectID) int { return strings.Compare(a.Hex(), b.Hex()) })
	for _, id := range keys {
		if state[id] == unseen {
			visit(id)
		}
	}
	return out
}

func sameIDs(a, b []bson.ObjectID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, id := range a {
		if !slices.Contains(b, id) {
			return false
		}
	}
	return true
}

func hexList(ids []bson.ObjectID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Hex()
	}
	return out
}

func hexes(ids []bson.ObjectID) string { return "[" + strings.Join(hexList(ids), ", ") + "]" }
