package den

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/den-project/den/den/internal/held"

	"github.com/den-project/den/den/internal/base"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/queue"
)

// NodeQueuesMax is the most queues a node lists in its node document.
// Past it, the node lists the queues it holds tasks of first, then those
// with tasks to do, then the rest by name, and counts what it left out in
// queues_left_out: with 10,000 queues the document stays under 100 KB
// instead of growing to megabytes rewritten every pass.
const NodeQueuesMax = 256

// othersCounter tells how many tasks of queue q the other nodes held at
// the last count (the claimer does).
type othersCounter interface {
	othersRunning(q bson.ObjectID) int
}

// heartbeat writes the node document: its timestamp every pass (and, when
// passes are slow, from keepAlive), what the node says of itself (version,
// pid, start time, the host's resources and what it offers tasks), and the
// queues it serves or holds tasks of. It knows the queues it last listed
// and when, how many it left out, and when the document was last written.
type heartbeat struct {
	*base.Env
	params heartbeatParams
	// held and capacity are the claimer's: what the node holds, and what
	// it has for tasks that request resources.
	held     *held.Tasks
	capacity *capacity
	// others tells how many tasks of a queue the other nodes held at the
	// last count (the claimer).
	others othersCounter
	// lastRound is the node's last completed round of housekeeping (nil:
	// none yet), which the node document carries; the housekeeping sets
	// it at the end of each round that succeeds.
	lastRound atomic.Pointer[queue.Housekeeping]

	// host samples the host's resources for the node document; pid and
	// started describe this process.
	host    *resources.Sampler
	pid     int
	started time.Time
	// plugins are the plugins this node serves, written in its document.
	plugins []string

	queues  []queue.NodeQueue
	at      time.Time
	leftOut int
	// last is when the document was last written (UnixNano), by a pass or
	// by keepAlive.
	last atomic.Int64
}

// write writes the node document of a full pass (the
// protocol's heartbeat): its timestamp, what the node says of itself, and
// its queues array, only when an entry changed or RefreshEvery has
// passed. It returns the node-wide limit the operator set in it.
func (h *heartbeat) write(ctx context.Context, queues, serve []queue.Queue, now time.Time) (queue.NodeLimit, string, error) {
	entries := h.entries(queues, serve)
	write := entries
	if slices.Equal(entries, h.queues) && now.Sub(h.at) < h.params.RefreshEvery {
		write = nil // unchanged: the timestamp only
	}
	limit, problem, err := h.Store.WriteNodeDocument(ctx, h.params.Name, write, h.self(ctx, now), now)
	if err != nil {
		return nil, "", err
	}
	h.last.Store(now.UnixNano())
	if write != nil {
		h.queues, h.at = entries, now
	}
	return limit, problem, nil
}

// entries is the queues array of the node document: the queues the
// node serves or holds tasks of (not every queue of the database), each
// as the protocol defines its entry, at most NodeQueuesMax of them.
//
// It makes an entry for those it lists only: with 80,000 served queues,
// it picks the idle ones to list by name among them (the first by name
// of those it may still list) without sorting them all, every pass.
func (h *heartbeat) entries(queues, serve []queue.Queue) []queue.NodeQueue {
	holds, _ := h.held.Counts()
	// serve is the start of queues (serveable); a queue after it is
	// listed only when the node holds tasks of it.
	type candidate struct {
		i    int
		rank int
	}
	var busy []candidate // ranks 0 and 1
	var idle nameHeap    // rank 2: the first by name, at most what is left
	idleCount := 0
	for i := range queues {
		q := &queues[i]
		if i >= len(serve) && holds[q.ID] == 0 {
			continue
		}
		doing := h.others.othersRunning(q.ID) + holds[q.ID]
		switch {
		case holds[q.ID] > 0:
			busy = append(busy, candidate{i, 0})
		case doing > 0 || (q.CountTodo != nil && *q.CountTodo-int64(doing) > 0):
			busy = append(busy, candidate{i, 1})
		default:
			idleCount++
			idle.keep(queues, i, NodeQueuesMax)
		}
	}
	listed := make([]candidate, 0, min(len(busy)+idleCount, NodeQueuesMax))
	listed = append(listed, busy...)
	h.leftOut = 0
	if len(busy)+idleCount > NodeQueuesMax {
		for _, i := range idle.idx {
			listed = append(listed, candidate{i, 2})
		}
		slices.SortStableFunc(listed, func(a, b candidate) int {
			if c := a.rank - b.rank; c != 0 {
				return c
			}
			return strings.Compare(queue.NodeQueueName(queues[a.i].Name), queue.NodeQueueName(queues[b.i].Name))
		})
		h.leftOut = len(busy) + idleCount - min(len(listed), NodeQueuesMax)
		listed = listed[:min(len(listed), NodeQueuesMax)]
	} else {
		listed = listed[:0]
		for i := range queues {
			if i < len(serve) || holds[queues[i].ID] > 0 {
				listed = append(listed, candidate{i, 0})
			}
		}
	}
	entries := make([]queue.NodeQueue, 0, len(listed))
	for _, c := range listed {
		q := queues[c.i]
		entries = append(entries, queue.NewNodeQueue(q, h.others.othersRunning(q.ID)+holds[q.ID]))
	}
	return entries
}

// nameHeap keeps the indexes of the queues whose names come first, at
// most n of them: a max-heap by name, the last kept on top.
type nameHeap struct {
	idx    []int
	queues []queue.Queue
}

func (h *nameHeap) Len() int { return len(h.idx) }
func (h *nameHeap) Less(a, b int) bool {
	return queue.NodeQueueName(h.queues[h.idx[a]].Name) > queue.NodeQueueName(h.queues[h.idx[b]].Name)
}
func (h *nameHeap) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *nameHeap) Push(x any)    { h.idx = append(h.idx, x.(int)) }
func (h *nameHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// keep adds queue i of queues if its name comes before the last kept, or
// fewer than n are kept.
func (h *nameHeap) keep(queues []queue.Queue, i, n int) {
	h.queues = queues
	switch {
	case len(h.idx) < n:
		heap.Push(h, i)
	case queue.NodeQueueName(queues[i].Name) < queue.NodeQueueName(queues[h.idx[0]].Name):
		h.idx[0] = i
		heap.Fix(h, 0)
	}
}

// keepAlive counts the node document as written now, then writes its
// timestamp when no pass has written
// it for two intervals, and at least 10 seconds, (a pass slowed by a large document or a slow
// server), so that other nodes do not take this one for dead. Normally it
// writes nothing. The returned func stops it.
func (h *heartbeat) keepAlive(ctx context.Context) (stop func()) {
	h.last.Store(h.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.params.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := h.Now()
			if now.Sub(time.Unix(0, h.last.Load())) < max(2*h.params.Interval, 10*time.Second) {
				continue
			}
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			if err := h.Store.WriteNodeTimestamp(actx, h.params.Name, now); err == nil {
				h.last.Store(now.UnixNano())
			}
			acancel()
		}
	}()
	return func() { cancel(); <-done }
}

// self is what the node writes of itself with its heartbeat: version, pid,
// start time and the host's resources (sampled at most every
// ResourcesEvery; a part gopsutil cannot read is left zero, logged once).
func (h *heartbeat) self(ctx context.Context, now time.Time) *queue.NodeSelf {
	res, err := h.host.Sample(ctx, now)
	if err != nil {
		if h.Notes.Set("resources", err.Error()) {
			h.Log.Warn("cannot read all of the host's resources for the node document; writing what it could", zap.Error(err))
		}
	} else if h.Notes.Clear("resources") {
		h.Log.Info("host resources readable again")
	}
	if res != nil {
		// A copy: the sampler keeps res for its next calls.
		withOffer, offer := *res, h.capacity.offer(res, h.held.Reserved())
		withOffer.Offer = &offer
		res = &withOffer
	}
	self := &queue.NodeSelf{Version: h.params.Version, PID: h.pid, Started: h.started, Resources: res, QueuesLeftOut: h.leftOut, Plugins: h.plugins}
	self.Housekeeping = h.lastRound.Load()
	return self
}

// writeLast writes the node document one last time, as the node stops,
// with stopped: the node stopped cleanly (den node list tells it from a
// dead one).
func (h *heartbeat) writeLast() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	now := h.Now()
	self := h.self(ctx, now)
	self.Stopped = now
	if _, _, err := h.Store.WriteNodeDocument(ctx, h.params.Name, h.queues, self, now); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		h.Log.Warn("could not update the node document at shutdown", zap.Error(err))
	}
}

// offer is what this node offers one task's request now, as its node
// document says (resources.offer).
func (h *heartbeat) offer(ctx context.Context) queue.Resources {
	host, _ := h.host.Sample(ctx, h.Now()) // nil: the limit, or the machine's total
	return h.capacity.offer(host, h.held.Reserved())
}
