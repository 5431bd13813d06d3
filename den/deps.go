package den

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
func (sw *sweeper) sweepDependencies(ctx context.Context, queueIDs []bson.ObjectID, now time.Time) error {
	blocked, err := sw.store.BlockedTasks(ctx, queueIDs, maxBlocked)
	if err != nil || len(blocked) == 0 {
		return err
	}
	var ids []bson.ObjectID
	for _, b := range blocked {
		ids = append(ids, b.After...)
	}
	statuses, err := sw.store.Statuses(ctx, ids)
	if err != nil {
		return err
	}
	// failed: what comes after a task failed here can never run either;
	// it is cancelled once all failures are recorded.
	failed := map[bson.ObjectID]string{}
	fail := func(b queue.Blocked, reason string) error {
		ok, err := sw.store.FailBlocked(ctx, b, reason, now)
		if err != nil || !ok {
			return err
		}
		sw.log.Warn("failed a task whose dependencies cannot be (reason in its stderr)", zap.String("task_id", b.ID.Hex()), zap.String("reason", reason))
		failed[b.ID] = reason
		return sw.store.DecrementTodo(ctx, b.Queue)
	}
	var ended []queue.EndedTask
	settled := map[bson.ObjectID]bool{}
	settle := func(id bson.ObjectID, status int) {
		if !settled[id] {
			settled[id] = true
			ended = append(ended, queue.EndedTask{ID: id, Status: status})
		}
	}
	waitingFor := map[bson.ObjectID][]bson.ObjectID{} // registered, still blocked
	for _, b := range blocked {
		switch {
		case b.Problem != "":
			if err := fail(b, b.Problem); err != nil {
				return err
			}
			continue
		case len(b.After) == 0:
			if err := fail(b, "after is empty; list the ids of the tasks it comes after"); err != nil {
				return err
			}
			continue
		case slices.Contains(b.After, b.ID):
			if err := fail(b, "after names the task itself"); err != nil {
				return err
			}
			continue
		case b.Registered && !sameIDs(b.After, b.AfterWas):
			if err := fail(b, fmt.Sprintf("after was changed to %s after den registered it as %s; dependencies can only be given when a task is created",
				hexes(b.After), hexes(b.AfterWas))); err != nil {
				return err
			}
			continue
		}
		var missing, waiting []bson.ObjectID
		endedBadly := false
		for _, d := range b.After {
			st, ok := statuses[d]
			switch {
			case !ok:
				missing = append(missing, d)
			case queue.EndedBadly(st):
				endedBadly = true
				settle(d, st)
			case st == queue.StatusSucceeded:
				settle(d, st)
			default:
				waiting = append(waiting, d)
			}
		}
		switch {
		case len(missing) > 0:
			if err := fail(b, fmt.Sprintf("after names %s, which do(es) not exist", hexes(missing))); err != nil {
				return err
			}
			continue
		case !b.Registered:
			// Registered as it is now; a dependency that ended badly is
			// dealt with below, once it waits for it.
			for _, d := range b.After {
				if queue.EndedBadly(statuses[d]) {
					waiting = append(waiting, d)
				}
			}
			ok, err := sw.store.MarkWaiting(ctx, b, waiting)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := sw.store.MarkDependents(ctx, waiting); err != nil {
				return err
			}
			b.Waiting = waiting
		}
		if endedBadly {
			continue // cancelled with the others below
		}
		if len(b.Waiting) > 0 {
			waitingFor[b.ID] = b.Waiting
		}
	}
	released, cancelled, err := sw.store.SettleDependents(ctx, ended, now)
	if len(cancelled) > 0 {
		sw.log.Info("cancelled tasks that come after one that cannot succeed", zap.Int("count", len(cancelled)))
	}
	if released > 0 {
		sw.log.Info("queued tasks whose dependencies succeeded", zap.Int64("count", released))
		sw.wake()
	}
	if err != nil {
		return err
	}
	for _, cycle := range cycles(waitingFor) {
		reason := "its dependencies form a cycle: " + strings.Join(hexList(cycle), " after ")
		for _, id := range cycle[:len(cycle)-1] {
			for _, b := range blocked {
				if b.ID == id {
					b.Status = queue.StatusBlocked
					if err := fail(b, reason); err != nil {
						return err
					}
				}
			}
		}
	}
	for id, reason := range failed {
		if _, err := sw.cancelDependents(ctx, []bson.ObjectID{id}, fmt.Sprintf("task %s, which it comes after, failed: %s", id.Hex(), reason), now); err != nil {
			return err
		}
	}
	return nil
}

// cancelDependents cancels what comes after ids, transitively, and logs it.
func (sw *sweeper) cancelDependents(ctx context.Context, ids []bson.ObjectID, why string, now time.Time) ([]bson.ObjectID, error) {
	cancelled, err := sw.store.CancelDependents(ctx, ids, why, now)
	if len(cancelled) > 0 {
		sw.log.Info("cancelled tasks that come after one that cannot succeed", zap.Int("count", len(cancelled)), zap.String("why", why))
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
