package den

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

func queueIDs(qs []queue.Queue) []bson.ObjectID {
	ids := make([]bson.ObjectID, len(qs))
	for i, q := range qs {
		ids[i] = q.ID
	}
	return ids
}

// claimState is what claiming needs from the last full pass: the queues
// this node serves, its node-wide limit and output mode, and the claimed
// and running counts of all nodes. Only the loop's goroutine uses it.
type claimState struct {
	ready   bool
	serve   []queue.Queue
	limit   queue.NodeLimit
	gfs     string
	running queue.Running
	// empty holds the queues a claim found nothing in, with their counts
	// then: they are not claimed from again until their counts change
	// (a writer that inserts a task raises count_total), or a probe finds
	// work in them.
	empty map[bson.ObjectID]counts
	// fit is what this claim round has free for tasks that request
	// resources, less what it claimed so far.
	fit *queue.Resources
	// malformed is what this claim round did with documents its claims
	// took that cannot be tasks (see malformed.go).
	malformed malformedTally
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
func (st *claimState) claimable(q queue.Queue) bool {
	c, marked := st.empty[q.ID]
	return !marked || c != countsOf(q)
}

// free is how many more tasks of q this node may start now: the queue's
// limit (per node for maxthreads, across nodes for threads) minus what runs:
// this node's own tasks as it holds them (exact between passes), and for
// threads also the other nodes' as the last count saw them.
func (n *Node) free(q queue.Queue, holds map[bson.ObjectID]int) int {
	if q.Global {
		st := &n.claiming
		others := st.running.Queue(q.ID) - st.running.Node(q.ID, n.cfg.Name)
		return q.MaxThreads - max(others, 0) - holds[q.ID]
	}
	return q.MaxThreads - holds[q.ID]
}

// claim claims tasks until each queue's limit or the node's limit (nil:
// none) is reached, and hands each to a runner. It makes one claim for
// all the queues of one sort order that may have work (findOneAndUpdate
// with queue: {$in: [...]}), so that its cost does not grow with the
// number of queues; queues a claim found empty are left alone until their
// counts change. With probe it first looks, with one query, for work
// in the queues found empty (tasks inserted without raising the counts,
// start_after times that have come).
//
// Queues that request resources (requested_resources on the queue) are
// claimed from largest request first (claimGroups), each group one claim
// as above; a group whose request no longer fits what the larger ones
// left is not asked. Without requests the claims are exactly as before.
//
// Under a node limit that leaves fewer free slots than queues with work,
// it claims queue by queue, the first queue rotating from pass to pass, so
// that no queue starves the others.
func (n *Node) claim(ctx context.Context, probe bool) error {
	st := &n.claiming
	if !st.ready || len(st.serve) == 0 {
		return nil
	}
	for q := range n.arrived.take() {
		delete(st.empty, q)
	}
	// What is free for tasks that request resources; a queue
	// whose own request does not fit waits this pass. The probe asks the
	// same, so that a task that does not fit does not make its queue look
	// claimable again and again.
	fit := n.capacity.free(n.held.reserved())
	st.fit = &fit
	st.malformed = malformedTally{}
	defer func() { st.malformed.report(n.log) }()
	if probe {
		if err := n.probe(ctx); err != nil {
			return err
		}
	}
	holds, total := n.held.counts()
	nodeFree := func() int {
		if st.limit == nil {
			return math.MaxInt
		}
		return *st.limit - total
	}
	var work []queue.Queue
	for _, q := range st.serve {
		if st.claimable(q) && n.free(q, holds) > 0 && queueFits(q, fit) {
			work = append(work, q)
		}
	}
	if len(work) == 0 || nodeFree() <= 0 {
		return nil
	}
	// took is called for each claim: it counts it and reports whether the
	// node may claim more.
	took := func(q bson.ObjectID) bool {
		holds[q]++
		total++
		return nodeFree() > 0
	}
	if nodeFree() < len(work) {
		n.offset = (n.offset + 1) % len(work)
		for i := range work {
			q := work[(n.offset+i)%len(work)]
			if n.free(q, holds) <= 0 || !queueFits(q, *st.fit) {
				continue
			}
			more, err := n.claimFrom(ctx, []queue.Queue{q}, holds, took)
			if err != nil || !more {
				return err
			}
		}
		return nil
	}
	for _, group := range n.claimGroups(work) {
		for len(group) > 0 {
			chunk := group[:min(len(group), queue.MaxClaimQueues)]
			group = group[len(chunk):]
			// What the larger requests before took may leave no room for
			// this chunk's own (a queue without a request always fits).
			chunk = slices.DeleteFunc(slices.Clone(chunk), func(q queue.Queue) bool {
				return n.free(q, holds) <= 0 || !queueFits(q, *st.fit)
			})
			if len(chunk) == 0 {
				continue
			}
			more, err := n.claimFrom(ctx, chunk, holds, took)
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

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
func (n *Node) claimGroups(work []queue.Queue) [][]queue.Queue {
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
		total := n.capacity.total()
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

// claimFrom claims from the given queues (one sort order) until they are
// empty or full, and reports whether the node may claim more.
func (n *Node) claimFrom(ctx context.Context, qs []queue.Queue, holds map[bson.ObjectID]int, took func(bson.ObjectID) bool) (bool, error) {
	st := &n.claiming
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
		c, ok, err := n.claimOne(ctx, ids, qs[0].Sort)
		if err != nil {
			return false, err
		}
		if !ok {
			for _, id := range ids {
				if q := byID[id]; st.claimable(q) {
					st.empty[id] = countsOf(q)
				}
			}
			return true, nil
		}
		if c.Malformed != nil {
			// Taken out of the way for good; the next claim meets the
			// next task. Past the pass's budget, the other groups of
			// queues go first.
			n.takeMalformed(ctx, *c.Malformed, &st.malformed)
			if st.malformed.failed+st.malformed.skipped >= malformedPerPass {
				return true, nil
			}
			continue
		}
		q, known := byID[c.Queue]
		if !known { // cannot happen: the claim names these queues
			n.release(c.ID, "claimed from a queue this node did not ask for")
			return false, nil
		}
		req := requestOf(c.Requested, q)
		n.held.claimed(c.ID, q.ID, req)
		if c.Unfit != "" {
			n.clearUnfit(ctx, c.ID, c.Unfit)
		}
		*st.fit = st.fit.Sub(req)
		n.metrics.Claims.WithLabelValues(n.metrics.Queue(q.Name)).Inc()
		more := took(q.ID)
		if n.free(q, holds) <= 0 || !queueFits(q, *st.fit) {
			ids = slices.DeleteFunc(ids, func(id bson.ObjectID) bool { return id == q.ID })
		}
		if q.Global {
			over, err := n.overQueueLimit(ctx, q)
			if err != nil || over {
				n.release(c.ID, "queue-wide threads limit reached by other nodes")
				if err != nil {
					return false, err
				}
				ids = slices.DeleteFunc(ids, func(id bson.ObjectID) bool { return id == q.ID })
				continue
			}
		}
		if n.cfg.BeforeHandOver != nil {
			n.cfg.BeforeHandOver(c.ID)
		}
		if ctx.Err() != nil {
			// Shutting down between claim and hand-over: put it back.
			n.release(c.ID, "node stopping")
			return false, nil
		}
		mode := st.gfs
		if q.GFS != "" {
			mode = q.GFS
		}
		if err := n.runners.start(q, c.ID, mode); err != nil {
			n.log.Error("cannot start a task runner; putting the task back", zap.String("task_id", c.ID.Hex()), zap.Error(err))
			n.release(c.ID, "runner did not start")
			return false, nil
		}
		if !more {
			return false, nil
		}
	}
	return true, nil
}

// probe looks, with one query, for claimable tasks in the served queues
// that claims found empty, and makes each queue it finds work in
// claimable again.
func (n *Node) probe(ctx context.Context) error {
	st := &n.claiming
	var ids []bson.ObjectID
	for _, q := range st.serve {
		if !st.claimable(q) {
			ids = append(ids, q.ID)
		}
	}
	for len(ids) > 0 {
		id, ok, err := n.store.Probe(ctx, ids, n.now(), st.fit)
		if err != nil || !ok {
			return err
		}
		delete(st.empty, id)
		ids = slices.DeleteFunc(ids, func(x bson.ObjectID) bool { return x == id })
	}
	return nil
}

// overQueueLimit checks, after a claim and before its hand-over, that the
// queue-wide limit (threads) still holds with it. Nodes count and then claim,
// so two nodes can both claim the last slot; but the later of two checks
// sees both claims, so at least one of them gives its claim back and the
// limit holds among den nodes.
func (n *Node) overQueueLimit(ctx context.Context, q queue.Queue) (bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	count, err := n.store.RunningInQueue(cctx, q.ID)
	return count > int64(q.MaxThreads), err
}

// claimOne makes one claim in the given queues. The claim is not
// cancelled by shutdown: a claim interrupted half way could leave a task
// claimed that nobody knows about. If the claim's reply is lost, the claim
// may still have landed: the task is then put back, recognised by the
// claim's own mtime.
func (n *Node) claimOne(ctx context.Context, ids []bson.ObjectID, sort string) (queue.Claimed, bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	at := n.now().Truncate(time.Millisecond)
	c, ok, err := n.store.Claim(cctx, queue.ClaimRequest{Queues: ids, Sort: sort, Node: n.cfg.Name, At: at, Free: n.claiming.fit})
	if err != nil {
		if released, rerr := n.store.ReleaseLost(cctx, ids, n.cfg.Name, at); rerr == nil && released > 0 {
			n.log.Warn("a claim failed after it landed; task put back", zap.Error(err))
		}
	}
	return c, ok, err
}

// release puts a claimed task back in its queue.
func (n *Node) release(id bson.ObjectID, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := n.store.Release(ctx, id, n.cfg.Name, n.now())
	if err == nil {
		n.held.done(id, n.now())
	}
	switch {
	case err != nil:
		n.log.Error("cannot put a claimed task back; it will be reaped as orphaned", zap.String("task_id", id.Hex()), zap.String("why", why), zap.Error(err))
	case ok:
		n.log.Info("claimed task put back in its queue", zap.String("task_id", id.Hex()), zap.String("why", why))
	}
}

// requestOf is what a claimed task requests: its own requested_resources,
// else its queue's, else nothing.
func requestOf(own *queue.Resources, q queue.Queue) queue.Resources {
	switch {
	case own != nil:
		return *own
	case q.Control.Requested != nil:
		return *q.Control.Requested
	}
	return queue.Resources{}
}

// queueFits reports whether a queue's own requested_resources (which its
// tasks without one inherit) fit in free.
func queueFits(q queue.Queue, free queue.Resources) bool {
	return q.Control.Requested == nil || q.Control.Requested.Fits(free)
}
