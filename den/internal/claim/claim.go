package claim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/queue"
)

// Params is what the claimer reads of the configuration.
type Params struct {
	Name         string
	Interval     time.Duration
	RefreshEvery time.Duration
	Arrivals     ArrivalSource
	// BeforeHandOver, when set, is called with each task claimed, before
	// it is handed to a runner (den.Config.BeforeHandOver; tests only).
	BeforeHandOver func(ctx context.Context, task bson.ObjectID)
}

// claimer claims queued tasks for the node, within the queues' and the
// node's limits and what the node has free for tasks that request
// resources, and hands each to the pool. It keeps what the node holds
// (held), pauses claiming while runners fail to start their tasks, and is
// woken to claim at once when a runner is done with its task or a task
// arrives in a queue (watchArrivals).
//
// What it knows of the queues is what the last full pass read: the queues
// this node serves, its node-wide limit and output mode, and the claimed
// and running counts of all nodes. Only the loop's goroutine claims.
type Claimer struct {
	*base.Env
	params Params
	// pool start the tasks it claims.
	pool Starter
	// held is what this node holds (its claimed and running tasks), and
	// capacity what it has for tasks that request resources.
	Held     *held.Tasks
	Capacity *Capacity

	// pass is what the last full pass read that claims go by (readPass).
	pass passRead
	// empty holds the queues a claim found nothing in, and those with no
	// work by their counts (readPass), with their counts then: they are
	// not claimed from again until their counts say there is work (a
	// writer that inserts a task raises them), or a probe finds work in
	// them. seen are the served queues readPass has met.
	empty map[bson.ObjectID]counts
	seen  map[bson.ObjectID]bool
	// aside are the queues whose last claim took a document that cannot
	// be a task: they are claimed from after all the others, each on its
	// own, so that another queue's tasks never wait behind their
	// documents. A claim there that finds a task, or nothing, puts the
	// queue back with the others.
	aside map[bson.ObjectID]bool
	// rateWait are the rate-limited queues whose limit refused a start,
	// with when it frees: they are not claimed from until then
	// (rateWaiting).
	rateWait map[bson.ObjectID]time.Time
	// malformedSince is when the claims of this full pass first met a
	// document that cannot be a task (takeMalformed).
	malformedSince time.Time
	// offset rotates which queue claims first under a node limit.
	offset int
	// prio is which served queues have queued tasks with a priority, as
	// the last full pass that claimed found (priority.go).
	prio priorityBook

	// wake is signalled when a slot is free or a task arrived: claim again
	// now. arrived are the queues new tasks arrived in.
	wake    chan struct{}
	arrived arrivals

	// pause is claiming's pause after runners fail to start.
	pause startPause

	// unsettled are the claims this node could not put right yet; each
	// claim round tries again.
	unsettled unsettled

	// progress is marked as each claim is answered (Ready).
	Progress *base.Progress
}

// passRead is what the last full pass read that claims go by: ready is
// set once a full pass has read the queues; serve, the queues this node
// serves; limit, its node-wide limit (nil: none); gfs, its output mode.
// running are the claimed and running counts of all nodes, by queue, at
// runningAt.
type passRead struct {
	ready     bool
	serve     []queue.Queue
	limit     queue.NodeLimit
	gfs       string
	running   queue.Running
	runningAt time.Time
}

// startPause is claiming's pause after runners fail to start: failures
// counts runners in a row that exited before starting their task, and
// claiming pauses until until.
type startPause struct {
	failures atomic.Int64
	mu       sync.Mutex
	until    time.Time
}

// unsettled are claims whose outcome the node could not put right when it
// happened: a claim whose reply was lost (it may have landed) and whose
// put-back failed too, and claimed tasks it could not put back. Each claim
// round tries again, so that once MongoDB answers no such task waits for
// orphan_age, claimed by this node and never started.
type unsettled struct {
	mu sync.Mutex
	// lost are claims that may have landed: the queues they were made in
	// and their mtime, which tells the task they took apart.
	lost []lostClaim
	// back are claimed tasks to put back, with why.
	back map[bson.ObjectID]string
}

type lostClaim struct {
	queues []bson.ObjectID
	at     time.Time
}

func (u *unsettled) addLost(queues []bson.ObjectID, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.lost = append(u.lost, lostClaim{slices.Clone(queues), at})
}

func (u *unsettled) addBack(id bson.ObjectID, why string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.back == nil {
		u.back = map[bson.ObjectID]string{}
	}
	u.back[id] = why
}

// take returns what is unsettled, and forgets it.
func (u *unsettled) take() ([]lostClaim, map[bson.ObjectID]string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	lost, back := u.lost, u.back
	u.lost, u.back = nil, nil
	return lost, back
}

// settle tries again to put right the claims that are unsettled: a claim
// that may have landed is put back by its mtime, a claimed task by its id.
// What fails again stays for the next round.
func (cl *Claimer) settle(ctx context.Context) {
	lost, back := cl.unsettled.take()
	if len(lost) == 0 && len(back) == 0 {
		return
	}
	failed := false
	for _, l := range lost {
		released, err := cl.Store.ReleaseLost(ctx, l.queues, cl.params.Name, l.at)
		if err != nil {
			cl.unsettled.addLost(l.queues, l.at)
			failed = true
			continue
		}
		if released > 0 {
			cl.Log.Warn("a claim whose reply was lost had landed; task put back", zap.Int64("tasks", released))
		}
	}
	for id, why := range back {
		if !cl.putBack(ctx, id, why) {
			cl.unsettled.addBack(id, why)
			failed = true
		}
	}
	if !failed && cl.Notes.Clear("unsettled") {
		cl.Log.Info("the claims that could not be put back are settled")
	}
}

// taskStarter starts the task a claim took in a runner (the pool).
type Starter interface {
	Start(q queue.Queue, taskID bson.ObjectID, gfs string) error
}

func New(e *base.Env, params Params, pool Starter, limits ResourceLimits, p *base.Progress) *Claimer {
	return &Claimer{
		Env: e, params: params, pool: pool, Held: held.New(), Capacity: &Capacity{limits: limits},
		empty: map[bson.ObjectID]counts{}, seen: map[bson.ObjectID]bool{}, aside: map[bson.ObjectID]bool{},
		rateWait: map[bson.ObjectID]time.Time{}, wake: make(chan struct{}, 1), Progress: p,
	}
}

// counts are a queue's count_todo and count_total, -1 when unknown.
type counts struct{ todo, total int64 }

func countsOf(q queue.Queue) counts {
	c := counts{-1, -1}
	if q.CountTodo != nil {
		c.todo = *q.CountTodo
	}
	if q.CountTotal != nil {
		c.total = *q.CountTotal
	}
	return c
}

// claimable reports whether a claim in q may find something: it was not
// found empty since its counts last changed.
func (cl *Claimer) claimable(q queue.Queue) bool {
	c, marked := cl.empty[q.ID]
	return !marked || c != countsOf(q)
}

// free is how many more tasks of q this node may start now: the queue's
// limit (per node for maxthreads, across nodes for threads) minus what runs:
// this node's own tasks as it holds them (exact between passes), and for
// threads also the other nodes' as the last count saw them.
func (cl *Claimer) free(q queue.Queue, holds map[bson.ObjectID]int) int {
	if q.Global {
		return q.MaxThreads - cl.OthersRunning(q.ID) - holds[q.ID]
	}
	return q.MaxThreads - holds[q.ID]
}

// claim claims tasks until each queue's limit or the node's limit (nil:
// none) is reached, and hands each to a runner. It makes one claim for
// all the queues of one sort order that may have work (findOneAndUpdate
// with queue: {$in: [...]}), so that its cost does not grow with the
// number of queues; queues a claim found empty are left alone until their
// counts change, or the probe (probe.go) finds work in them.
//
// Queues that request resources (requested_resources on the queue) are
// claimed from largest request first (claimGroups), each group one claim
// as above; a group whose request no longer fits what the larger ones
// left is not asked. Without requests the claims are exactly as before.
//
// Under a node limit that leaves fewer free slots than queues with work,
// it claims queue by queue, the first queue rotating from pass to pass, so
// that no queue starves the others.
func (cl *Claimer) Claim(ctx context.Context) error {
	if !cl.pass.ready || len(cl.pass.serve) == 0 {
		return nil
	}
	for q := range cl.arrived.take() {
		delete(cl.empty, q)
	}
	// What is free for tasks that request resources; a queue
	// whose own request does not fit waits this pass. The probe asks the
	// same (probe.go), so that a task that does not fit does not make its
	// queue look claimable again and again.
	holds, total := cl.Held.Counts()
	r := &claimRound{holds: holds, total: total, limit: cl.pass.limit, fit: cl.FreeToFit()}
	defer func() { r.malformed.report(cl.Log) }()
	// work are the queues to claim from; later those set aside, claimed
	// from after them.
	var work, later []queue.Queue
	for _, q := range cl.pass.serve {
		if cl.claimable(q) && cl.free(q, holds) > 0 && queueFits(q, r.fit) && !cl.rateWaiting(q) {
			if cl.aside[q.ID] {
				later = append(later, q)
			} else {
				work = append(work, q)
			}
		}
	}
	way := claimWay(r.nodeFree(), len(work)+len(later))
	if way != claimNone {
		if err := cl.prio.learn(ctx, cl.Store, work, later); err != nil {
			return err
		}
	}
	switch way {
	case claimNone:
		return nil
	case claimAlone:
		if more, err := cl.claimAlone(ctx, r, work); err != nil || !more {
			return err
		}
		_, err := cl.claimAlone(ctx, r, later)
		return err
	}
	if more, err := cl.claimGrouped(ctx, r, work); err != nil || !more {
		return err
	}
	// Then the queues set aside, this round's among them.
	later = later[:0]
	for _, q := range cl.pass.serve {
		if cl.aside[q.ID] && cl.claimable(q) && !cl.rateWaiting(q) {
			later = append(later, q)
		}
	}
	_, err := cl.claimAlone(ctx, r, later)
	return err
}

// claimRound is one claim round's own: what the node holds, by queue and
// in all, against its limit (nil: none), counted as the round claims;
// what it has free for tasks that request resources (fit), less what the
// round claimed; and what it did with documents its claims took that
// cannot be tasks (takeMalformed).
type claimRound struct {
	holds     map[bson.ObjectID]int
	total     int
	limit     queue.NodeLimit
	fit       queue.Resources
	malformed malformedTally
}

// nodeFree is how many more tasks the node may hold.
func (r *claimRound) nodeFree() int {
	if r.limit == nil {
		return math.MaxInt
	}
	return *r.limit - r.total
}

// took counts a claim from queue q, and reports whether the node may
// claim more.
func (r *claimRound) took(q bson.ObjectID) bool {
	r.holds[q]++
	r.total++
	return r.nodeFree() > 0
}

// How a claim goes about the queues with work (claimWay).
const (
	// claimNone: no queue has work, or the node has no free slot.
	claimNone = iota
	// claimAlone: fewer free slots than queues with work: queue by queue,
	// the first rotating from round to round, so that no queue starves
	// the others.
	claimAlone
	// claimGrouped: one claim for all the queues of a group
	// (claimGroups), then the queues set aside, queue by queue.
	claimGrouped
)

// claimWay is how a claim goes about queues queues with work while the
// node has nodeFree slots free.
func claimWay(nodeFree, queues int) int {
	switch {
	case queues == 0 || nodeFree <= 0:
		return claimNone
	case nodeFree < queues:
		return claimAlone
	}
	return claimGrouped
}

// claimAlone claims from each of qs on its own, the first rotating from
// round to round; it reports whether the node may claim more.
func (cl *Claimer) claimAlone(ctx context.Context, r *claimRound, qs []queue.Queue) (bool, error) {
	if len(qs) == 0 {
		return true, nil
	}
	cl.offset = (cl.offset + 1) % len(qs)
	for i := range qs {
		q := qs[(cl.offset+i)%len(qs)]
		if cl.free(q, r.holds) <= 0 || !queueFits(q, r.fit) || (cl.aside[q.ID] && cl.malformedSpent(r)) || cl.rateWaiting(q) {
			continue
		}
		more, err := cl.claimFrom(ctx, r, []queue.Queue{q})
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}

// claimGrouped claims from the queues of work a group at a time
// (claimGroups), up to queue.MaxClaimQueues queues a claim; it reports
// whether the node may claim more.
func (cl *Claimer) claimGrouped(ctx context.Context, r *claimRound, work []queue.Queue) (bool, error) {
	for _, group := range cl.claimGroups(work) {
		for len(group) > 0 {
			chunk := group[:min(len(group), queue.MaxClaimQueues)]
			group = group[len(chunk):]
			// What the larger requests before took may leave no room for
			// this chunk's own (a queue without a request always fits);
			// a queue set aside by a claim of this round waits too.
			chunk = slices.DeleteFunc(slices.Clone(chunk), func(q queue.Queue) bool {
				return cl.free(q, r.holds) <= 0 || !queueFits(q, r.fit) || cl.aside[q.ID] || cl.rateWaiting(q)
			})
			if len(chunk) == 0 {
				continue
			}
			more, err := cl.claimFrom(ctx, r, chunk)
			if err != nil || !more {
				return false, err
			}
		}
	}
	return true, nil
}

// malformedSpent reports whether claim round r has taken as many
// documents that cannot be tasks out of the way as a round may, or this
// pass spent as long on them.
func (cl *Claimer) malformedSpent(r *claimRound) bool {
	m := r.malformed
	return m.failed+m.skipped >= malformedPerPass || (!cl.malformedSince.IsZero() && time.Since(cl.malformedSince) > malformedTime)
}

// newPass starts a full pass: the time its claims may spend on documents
// that cannot be tasks starts again.
func (cl *Claimer) newPass() { cl.malformedSince = time.Time{} }

// sortIndex orders the claim's sort orders as claims take them among
// queues of one request size: fifo, lifo, default.
func sortIndex(q queue.Queue) int {
	switch q.Sort {
	case queue.SortFIFO:
		return 0
	case queue.SortLIFO:
		return 1
	}
	return 2
}

// claimGroups splits the queues to claim from into the groups that one
// claim (queue: {$in: [...]}) may name: queues of one sort order and one
// queue-level requested_resources. The largest request goes first (the
// largest task that fits is preferred), its size the larger of its
// memory and cores as shares of what this node offers; then, among equal
// requests, fifo, lifo and default queues, in the order they were given.
// Queues without a request come last, so with no requests this is one
// group per sort order, the claims as before. A task's own request cannot
// be ordered by: the claim's index does not hold it.
func (cl *Claimer) claimGroups(work []queue.Queue) [][]queue.Queue {
	type key struct {
		req  queue.Resources
		sort int
	}
	var keys []key
	groups := map[key][]queue.Queue{}
	requests := false
	for _, q := range work {
		k := key{sort: sortIndex(q)}
		if q.Control.Requested != nil {
			k.req, requests = *q.Control.Requested, true
		}
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], q)
	}
	if requests {
		total := cl.Capacity.total()
		size := func(r queue.Resources) float64 {
			return max(share(r.MemoryMB, total.MemoryMB), share(r.CPUs, total.CPUs))
		}
		slices.SortStableFunc(keys, func(a, b key) int {
			switch sa, sb := size(a.req), size(b.req); {
			case sa != sb:
				return cmp.Compare(sb, sa)
			case a.req.MemoryMB != b.req.MemoryMB:
				return cmp.Compare(b.req.MemoryMB, a.req.MemoryMB)
			case a.req.CPUs != b.req.CPUs:
				return cmp.Compare(b.req.CPUs, a.req.CPUs)
			}
			return cmp.Compare(a.sort, b.sort)
		})
	} else {
		slices.SortStableFunc(keys, func(a, b key) int { return cmp.Compare(a.sort, b.sort) })
	}
	out := make([][]queue.Queue, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
}

// share is part of whole (0 when whole is not positive).
func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}

// claimFrom claims from the given queues (one sort order) within round r
// until they are empty or full, and reports whether the node may claim
// more.
func (cl *Claimer) claimFrom(ctx context.Context, r *claimRound, qs []queue.Queue) (bool, error) {
	byID := make(map[bson.ObjectID]queue.Queue, len(qs))
	ids := make([]bson.ObjectID, 0, len(qs))
	for _, q := range qs {
		byID[q.ID] = q
		ids = append(ids, q.ID)
	}
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			// The pass's time is up (or the node stops): the pass says
			// so, rather than passing for a short one.
			return false, fmt.Errorf("claim in %d queues: %w", len(ids), err)
		}
		c, ok, err := cl.claimOne(ctx, ids, qs[0].Sort, cl.prio.any(ids), r.fit)
		if err != nil {
			return false, err
		}
		cl.Progress.Mark("claims", cl.Now())
		if !ok {
			for _, id := range ids {
				if q := byID[id]; cl.claimable(q) {
					cl.empty[id] = countsOf(q)
				}
				delete(cl.aside, id)
			}
			return true, nil
		}
		if c.Malformed != nil {
			// Taken out of the way for good; the next claim meets the
			// next task. Its queue is set aside: the other queues of
			// this claim go first, and it comes after every other
			// queue, on its own, within the round's budget.
			cl.takeMalformed(ctx, *c.Malformed, &r.malformed)
			if q := c.Malformed.Queue; !q.IsZero() {
				cl.aside[q] = true
				if len(ids) > 1 {
					// The others go on; this one waits its turn.
					ids = slices.DeleteFunc(ids, func(id bson.ObjectID) bool { return id == q })
					continue
				}
			}
			if cl.malformedSpent(r) {
				return true, nil
			}
			continue
		}
		q, known := byID[c.Queue]
		if !known { // cannot happen: the claim names these queues
			cl.release(c.ID, "claimed from a queue this node did not ask for")
			return false, nil
		}
		delete(cl.aside, q.ID)
		req := queue.Requested(c.Requested, q)
		cl.Held.Claimed(c.ID, q.ID, req)
		if c.Unfit != "" {
			cl.clearUnfit(ctx, c.ID, c.Unfit)
		}
		r.fit = r.fit.Sub(req)
		cl.Metrics.Claims.WithLabelValues(cl.Metrics.Queue(q.Name)).Inc()
		more := r.took(q.ID)
		if cl.free(q, r.holds) <= 0 || !queueFits(q, r.fit) {
			ids = slices.DeleteFunc(ids, func(id bson.ObjectID) bool { return id == q.ID })
		}
		if ok, err := cl.mayStart(ctx, q, c.ID); err != nil || !ok {
			if err != nil {
				return false, err
			}
			ids = slices.DeleteFunc(ids, func(id bson.ObjectID) bool { return id == q.ID })
			continue
		}
		cl.Signals.NoteClaimed(c.ID)
		if cl.params.BeforeHandOver != nil {
			cl.params.BeforeHandOver(ctx, c.ID)
		}
		if ctx.Err() != nil {
			// Shutting down between claim and hand-over: put it back.
			cl.release(c.ID, "node stopping")
			return false, nil
		}
		mode := cl.pass.gfs
		if q.GFS != "" {
			mode = q.GFS
		}
		if err := cl.pool.Start(q, c.ID, mode); err != nil {
			cl.Log.Error("cannot start a task runner; putting the task back", zap.String("task_id", c.ID.Hex()), zap.Error(err))
			cl.release(c.ID, "runner did not start")
			return false, nil
		}
		if !more {
			return false, nil
		}
	}
	return true, nil
}

// mayStart checks, after a claim of task id in q and before its
// hand-over, the limits that hold across nodes: the queue-wide threads
// limit, then the queue's rate limit, whose start it takes. A task that
// may not start is put back, and false returned: its queue is not claimed
// from again this round.
func (cl *Claimer) mayStart(ctx context.Context, q queue.Queue, id bson.ObjectID) (bool, error) {
	if q.Global {
		over, err := cl.overQueueLimit(ctx, q)
		if err != nil || over {
			cl.release(id, "queue-wide threads limit reached by other nodes")
			return false, err
		}
	}
	if q.RateLimit != nil {
		ok, err := cl.takeStart(ctx, q, id)
		if err != nil || !ok {
			cl.release(id, rateLimited)
			return false, err
		}
	}
	return true, nil
}

// overQueueLimit checks, after a claim and before its hand-over, that the
// queue-wide limit (threads) still holds with it. Nodes count and then claim,
// so two nodes can both claim the last slot; but the later of two checks
// sees both claims, so at least one of them gives its claim back and the
// limit holds among den nodes.
func (cl *Claimer) overQueueLimit(ctx context.Context, q queue.Queue) (bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	count, err := cl.Store.RunningInQueue(cctx, q.ID)
	return count > int64(q.MaxThreads), err
}

// claimOne makes one claim in the given queues. The claim is not
// cancelled by shutdown: a claim interrupted half way could leave a task
// claimed that nobody knows about. If the claim's reply is lost, the claim
// may still have landed: the task is then put back, recognised by the
// claim's own mtime.
func (cl *Claimer) claimOne(ctx context.Context, ids []bson.ObjectID, sort string, prio bool, free queue.Resources) (queue.Claimed, bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	at := cl.Now().Truncate(time.Millisecond)
	c, ok, err := cl.Store.Claim(cctx, queue.ClaimRequest{Queues: ids, Sort: sort, Node: cl.params.Name, At: at, Free: &free, Priorities: prio})
	if err != nil {
		released, rerr := cl.Store.ReleaseLost(cctx, ids, cl.params.Name, at)
		switch {
		case rerr != nil:
			// It may have landed: the next rounds put it back.
			cl.unsettled.addLost(ids, at)
			if cl.Notes.Set("unsettled", "") {
				cl.Log.Warn("a claim failed and may have landed; putting its task back each claim round until MongoDB answers", zap.Error(err))
			}
		case released > 0:
			cl.Log.Warn("a claim failed after it landed; task put back", zap.Error(err))
		}
	}
	return c, ok, err
}

// release puts a claimed task back in its queue. If MongoDB does not
// answer, the task stays held and the next claim rounds try again.
func (cl *Claimer) release(id bson.ObjectID, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !cl.putBack(ctx, id, why) {
		cl.PutBackLater(id, why)
	}
}

// putBackLater keeps a claimed task that could not be put back for the
// next passes to put back.
func (cl *Claimer) PutBackLater(id bson.ObjectID, why string) {
	cl.unsettled.addBack(id, why)
	if cl.Notes.Set("unsettled", "") {
		cl.Log.Warn("cannot put a claimed task back; trying again each claim round until MongoDB answers", zap.String("task_id", id.Hex()), zap.String("why", why))
	}
}

// putBack puts a claimed task back in its queue, and lets it go; false
// when MongoDB did not answer.
func (cl *Claimer) putBack(ctx context.Context, id bson.ObjectID, why string) bool {
	ok, err := cl.Store.Release(ctx, id, cl.params.Name, cl.Now())
	if err != nil {
		return false
	}
	cl.Held.Done(id, cl.Now())
	switch {
	case ok && why == rateLimited:
		// The normal course of a rate-limited queue, up to once a
		// window on each node: not an operator's event.
		cl.Log.Debug("claimed task put back in its queue", zap.String("task_id", id.Hex()), zap.String("why", why))
	case ok:
		cl.Log.Info("claimed task put back in its queue", zap.String("task_id", id.Hex()), zap.String("why", why))
	}
	return true
}

// queueFits reports whether a queue's own requested_resources (which its
// tasks without one inherit) fit in free.
func queueFits(q queue.Queue, free queue.Resources) bool {
	return q.Control.Requested == nil || q.Control.Requested.Fits(free)
}

// clearUnfit removes the unfit note of a task this node has just claimed:
// it fits here after all. A failure is left to the sweep, which removes
// the notes of claimed and running tasks.
func (cl *Claimer) clearUnfit(ctx context.Context, id bson.ObjectID, was string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := cl.Store.SetUnfit(cctx, id, was, ""); err != nil {
		cl.Log.Debug("could not remove the unfit note of a claimed task; the sweep will", zap.String("task_id", id.Hex()), zap.Error(err))
	}
}

// globalInPlay reports whether a served queue with a queue-wide threads
// limit may have work: claims in it then need every node's running count
// fresh each pass.
func (cl *Claimer) globalInPlay(serve []queue.Queue) bool {
	for _, q := range serve {
		if q.Global && cl.claimable(q) {
			return true
		}
	}
	return false
}

// countRunning counts the claimed and running tasks of every node in
// every queue (tasks_doing in the node document), every RefreshEvery, and every
// pass while a queue-wide threads limit is in play: claims in such a queue
// need the other nodes' counts fresh.
func (cl *Claimer) CountRunning(ctx context.Context, serve []queue.Queue, now time.Time) error {
	if cl.pass.running == nil || now.Sub(cl.pass.runningAt) >= cl.params.RefreshEvery || cl.globalInPlay(serve) {
		running, err := cl.Store.RunningAll(ctx)
		if err != nil {
			return err
		}
		cl.pass.running, cl.pass.runningAt = running, now
	}
	return nil
}

// othersRunning is how many tasks of queue q the other nodes held when
// they were last counted.
func (cl *Claimer) OthersRunning(q bson.ObjectID) int {
	return max(cl.pass.running.Queue(q)-cl.pass.running.Node(q, cl.params.Name), 0)
}

// readPass takes what a full pass read for the claims until the next one:
// the queues this node serves, its node-wide limit and output mode.
//
// A served queue met for the first time with no work by its counts
// (count_todo missing, not a number, or 0) is left to the probe, as a
// queue a claim found empty is; and a queue found empty whose counts
// changed but still say there is no work stays so, with its new counts.
// Claims go where the counts say there is work, and the probe finds the
// rest (tasks inserted without raising the counts, start_after times that
// came) with one query: thousands of idle queues cost no claims. Queues
// that are gone (byID holds those read) are forgotten.
func (cl *Claimer) ReadPass(serve []queue.Queue, limit queue.NodeLimit, gfs string, byID queue.ByID) {
	cl.pass.ready, cl.pass.serve, cl.pass.limit, cl.pass.gfs = true, serve, limit, gfs
	for _, q := range serve {
		c := countsOf(q)
		idle := c.todo <= 0
		if !cl.seen[q.ID] {
			cl.seen[q.ID] = true
			if idle {
				cl.empty[q.ID] = c
			}
			continue
		}
		if was, marked := cl.empty[q.ID]; marked && was != c && idle {
			cl.empty[q.ID] = c
		}
	}
	for _, m := range []map[bson.ObjectID]bool{cl.seen, cl.aside} {
		for id := range m {
			if _, ok := byID[id]; !ok {
				delete(m, id)
			}
		}
	}
	for id := range cl.empty {
		if _, ok := byID[id]; !ok {
			delete(cl.empty, id)
		}
	}
}

// withWork are the served queues with tasks to do by their counts that
// claims did not find empty: those whose oldest ready task the
// housekeeping measures (oldestMeter).
func (cl *Claimer) WithWork() []queue.Queue {
	var out []queue.Queue
	for _, q := range cl.pass.serve {
		if q.CountTodo != nil && *q.CountTodo > 0 && cl.claimable(q) {
			out = append(out, q)
		}
	}
	return out
}

// woken is signalled when the claimer should claim at once.
func (cl *Claimer) Woken() <-chan struct{} { return cl.wake }

func (cl *Claimer) WakeUp() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// letGo frees the slot of a task whose runner is done with it, or whose
// claim was put back, and claims again at once.
func (cl *Claimer) LetGo(id bson.ObjectID) {
	cl.Held.Done(id, cl.Now())
	cl.WakeUp()
}

// runnerStarted ends the pause after runners that failed to start their
// task.
func (cl *Claimer) RunnerStarted() {
	cl.pause.failures.Store(0)
	if cl.Notes.Clear("runner-start") {
		cl.Log.Info("task runners start tasks again")
	}
}

// runnerStartFailed pauses claiming after a runner exited before starting
// its task, with a backoff that grows with each such runner in a row, so
// that a broken runner setup (bad credentials, a missing binary) does not
// spin.
func (cl *Claimer) RunnerStartFailed(taskID bson.ObjectID, exit string) {
	failures := cl.pause.failures.Add(1)
	pause := min(time.Duration(1<<min(failures, 10))*100*time.Millisecond, time.Minute)
	cl.pauseClaims(pause)
	if cl.Notes.Set("runner-start", "") {
		cl.Log.Error("a task runner exited before starting its task; task put back, claiming paused with backoff (see the runner log)",
			zap.String("task_id", taskID.Hex()), zap.String("exit", exit))
	}
}

func (cl *Claimer) pauseClaims(d time.Duration) {
	cl.pause.mu.Lock()
	defer cl.pause.mu.Unlock()
	if until := cl.Now().Add(d); until.After(cl.pause.until) {
		cl.pause.until = until
	}
}

// paused reports whether claiming is paused after runners failed to start.
func (cl *Claimer) Paused() bool {
	cl.pause.mu.Lock()
	defer cl.pause.mu.Unlock()
	return cl.Now().Before(cl.pause.until)
}

// ClaimPass gives the claimer what a full pass read (the served queues,
// the node's limit, the GridFS mode, every queue by _id, at at) and
// claims, unless claims are paused: it first settles the claims it could
// not put right before, and rechecks the queues' rate limits.
func (cl *Claimer) ClaimPass(ctx context.Context, serve []queue.Queue, limit queue.NodeLimit, gfs string, byID queue.ByID, at time.Time) error {
	cl.settle(ctx)
	cl.newPass()
	cl.ReadPass(serve, limit, gfs, byID)
	if err := cl.recheckRates(ctx, at); err != nil {
		return err
	}
	cl.prio.due = true
	if cl.Paused() {
		return nil
	}
	return cl.Claim(ctx)
}

// NeedsCount reports whether every node's claimed and running tasks must
// be counted before the claims of a pass that serves serve: when no count
// was made yet, or a queue-wide threads limit is in play.
func (cl *Claimer) NeedsCount(serve []queue.Queue) bool {
	return cl.pass.running == nil || cl.globalInPlay(serve)
}

// Running is every node's claimed and running tasks as last counted (nil
// before the first count).
func (cl *Claimer) Running() queue.Running { return cl.pass.running }

// MayProbe reports whether the probe may look for work now: the claims
// have read a pass's queues, are not paused, and the node has a free slot.
func (cl *Claimer) MayProbe() bool {
	return cl.pass.ready && !cl.Paused() && cl.nodeFree()
}
