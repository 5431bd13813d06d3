package heartbeat

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/queue"
)

// Params is what the heartbeat reads of the configuration.
type Params struct {
	Name         string
	Interval     time.Duration
	RefreshEvery time.Duration
	Version      string
}

// NodeQueuesMax is the most queues a node lists in its node document.
// Past it, the node lists the queues it holds tasks of first, then those
// with tasks to do, then the rest by name, and counts what it left out in
// queues_left_out: with 10,000 queues the document stays under 100 KB
// instead of growing to megabytes rewritten every pass.
const NodeQueuesMax = 256

// Offerer is what the node offers tasks that request resources
// (den's capacity): what it has free beside what its held tasks
// reserved, on a host that has host.
type Offerer interface {
	Offer(host *queue.NodeResources, reserved queue.Resources) queue.Resources
}

// OthersCounter tells how many tasks of queue q the other nodes held at
// the last count (the claimer does).
type OthersCounter interface {
	OthersRunning(q bson.ObjectID) int
}

// Beat writes the node document: its timestamp every pass (and, when
// passes are slow, from keepAlive), what the node says of itself (version,
// pid, start time, the host's resources and what it offers tasks), and the
// queues it serves or holds tasks of. It knows the queues it last listed
// and when, how many it left out, and when the document was last written.
type Beat struct {
	*base.Env
	Params Params
	// held and capacity are the claimer's: what the node holds, and what
	// it has for tasks that request resources.
	Held     *held.Tasks
	Capacity Offerer
	// others tells how many tasks of a queue the other nodes held at the
	// last count (the claimer).
	Others OthersCounter
	// lastRound is the node's last completed round of housekeeping (nil:
	// none yet), which the node document carries; the housekeeping sets
	// it at the end of each round that succeeds.
	LastRound atomic.Pointer[queue.Housekeeping]

	// host samples the host's resources for the node document; pid and
	// started describe this process.
	Host    *resources.Sampler
	PID     int
	Started time.Time
	// plugins are the plugins this node serves, written in its document.
	Plugins []string

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
func (h *Beat) Write(ctx context.Context, queues, serve []queue.Queue, now time.Time) (queue.NodeLimit, string, error) {
	entries := h.entries(queues, serve)
	write := entries
	if slices.Equal(entries, h.queues) && now.Sub(h.at) < h.Params.RefreshEvery {
		write = nil // unchanged: the timestamp only
	}
	limit, problem, err := h.Store.WriteNodeDocument(ctx, h.Params.Name, write, h.Self(ctx, now), now)
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
func (h *Beat) entries(queues, serve []queue.Queue) []queue.NodeQueue {
	holds, _ := h.Held.Counts()
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
		doing := h.Others.OthersRunning(q.ID) + holds[q.ID]
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
		entries = append(entries, queue.NewNodeQueue(q, h.Others.OthersRunning(q.ID)+holds[q.ID]))
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
func (h *Beat) KeepAlive(ctx context.Context) (stop func()) {
	h.last.Store(h.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.Params.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := h.Now()
			if now.Sub(time.Unix(0, h.last.Load())) < max(2*h.Params.Interval, 10*time.Second) {
				continue
			}
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			if err := h.Store.WriteNodeTimestamp(actx, h.Params.Name, now); err == nil {
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
func (h *Beat) Self(ctx context.Context, now time.Time) *queue.NodeSelf {
	res, err := h.Host.Sample(ctx, now)
	if err != nil {
		if h.Notes.Set("resources", err.Error()) {
			h.Log.Warn("cannot read all of the host's resources for the node document; writing what it could", zap.Error(err))
		}
	} else if h.Notes.Clear("resources") {
		h.Log.Info("host resources readable again")
	}
	if res != nil {
		// A copy: the sampler keeps res for its next calls.
		withOffer, offer := *res, h.Capacity.Offer(res, h.Held.Reserved())
		withOffer.Offer = &offer
		res = &withOffer
	}
	self := &queue.NodeSelf{Version: h.Params.Version, PID: h.PID, Started: h.Started, Resources: res, QueuesLeftOut: h.leftOut, Plugins: h.Plugins}
	self.Housekeeping = h.LastRound.Load()
	return self
}

// writeLast writes the node document one last time, as the node stops,
// with stopped: the node stopped cleanly (den node list tells it from a
// dead one).
func (h *Beat) WriteLast() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	now := h.Now()
	self := h.Self(ctx, now)
	self.Stopped = now
	if _, _, err := h.Store.WriteNodeDocument(ctx, h.Params.Name, h.queues, self, now); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		h.Log.Warn("could not update the node document at shutdown", zap.Error(err))
	}
}

// offer is what this node offers one task's request now, as its node
// document says (resources.offer).
func (h *Beat) Offer(ctx context.Context) queue.Resources {
	host, _ := h.Host.Sample(ctx, h.Now()) // nil: the limit, or the machine's total
	return h.Capacity.Offer(host, h.Held.Reserved())
}

// Load1 is the host's 1-minute load average as the heartbeat's sampler
// last read it (0 when it cannot).
func (h *Beat) Load1(ctx context.Context, now time.Time) float64 {
	res, _ := h.Host.Sample(ctx, now)
	if res == nil || len(res.Load) == 0 {
		return 0
	}
	return res.Load[0]
}
