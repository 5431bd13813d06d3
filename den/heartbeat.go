package den

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

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

// heartbeat writes the node document: its timestamp every pass (and, when
// passes are slow, from keepAlive), what the node says of itself (version,
// pid, start time, the host's resources and what it offers tasks), and the
// queues it serves or holds tasks of. It knows the queues it last listed
// and when, how many it left out, and when the document was last written.
type heartbeat struct {
	*common
	// held and capacity are the claimer's: what the node holds, and what
	// it has for tasks that request resources.
	held     *heldTasks
	capacity *capacity
	// othersRunning is how many tasks of a queue the other nodes held at
	// the last count (the claimer's).
	othersRunning func(q bson.ObjectID) int

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
	if slices.Equal(entries, h.queues) && now.Sub(h.at) < h.cfg.RefreshEvery {
		write = nil // unchanged: the timestamp only
	}
	limit, problem, err := h.store.Heartbeat(ctx, h.cfg.Name, write, h.self(ctx, now), now)
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
func (h *heartbeat) entries(queues, serve []queue.Queue) []queue.NodeQueue {
	holds, _ := h.held.counts()
	served := make(map[bson.ObjectID]bool, len(serve))
	for _, q := range serve {
		served[q.ID] = true
	}
	entries := make([]queue.NodeQueue, 0, min(len(serve), NodeQueuesMax))
	rank := make(map[string]int, len(serve))
	for _, q := range queues {
		if !served[q.ID] && holds[q.ID] == 0 {
			continue
		}
		e := queue.NewNodeQueue(q, h.othersRunning(q.ID)+holds[q.ID])
		switch {
		case holds[q.ID] > 0:
			rank[e.ID] = 0
		case e.TasksTodo > 0 || e.TasksDoing > 0:
			rank[e.ID] = 1
		default:
			rank[e.ID] = 2
		}
		entries = append(entries, e)
	}
	h.leftOut = 0
	if len(entries) > NodeQueuesMax {
		slices.SortStableFunc(entries, func(a, b queue.NodeQueue) int {
			if c := rank[a.ID] - rank[b.ID]; c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		h.leftOut = len(entries) - NodeQueuesMax
		entries = entries[:NodeQueuesMax]
	}
	return entries
}

// keepAlive counts the node document as written now, then writes its
// timestamp when no pass has written
// it for two intervals, and at least 10 seconds, (a pass slowed by a large document or a slow
// server), so that other nodes do not take this one for dead. Normally it
// writes nothing. The returned func stops it.
func (h *heartbeat) keepAlive(ctx context.Context) (stop func()) {
	h.last.Store(h.now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := h.now()
			if now.Sub(time.Unix(0, h.last.Load())) < max(2*h.cfg.Interval, 10*time.Second) {
				continue
			}
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			if err := h.store.Alive(actx, h.cfg.Name, now); err == nil {
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
		if h.notes.set("resources", err.Error()) {
			h.log.Warn("cannot read all of the host's resources for the node document; writing what it could", zap.Error(err))
		}
	} else if h.notes.clear("resources") {
		h.log.Info("host resources readable again")
	}
	if res != nil {
		// A copy: the sampler keeps res for its next calls.
		withOffer, offer := *res, h.capacity.offer(res, h.held.reserved())
		withOffer.Offer = &offer
		res = &withOffer
	}
	return &queue.NodeSelf{Version: h.cfg.Version, PID: h.pid, Started: h.started, Resources: res, QueuesLeftOut: h.leftOut, Plugins: h.plugins}
}

// writeLast writes the node document one last time, as the node stops,
// with stopped: the node stopped cleanly (den node list tells it from a
// dead one).
func (h *heartbeat) writeLast() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	now := h.now()
	self := h.self(ctx, now)
	self.Stopped = now
	if _, _, err := h.store.Heartbeat(ctx, h.cfg.Name, h.queues, self, now); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		h.log.Warn("could not update the node document at shutdown", zap.Error(err))
	}
}

// offer is what this node offers one task's request now, as its node
// document says (resources.offer).
func (h *heartbeat) offer(ctx context.Context) queue.Resources {
	host, _ := h.host.Sample(ctx, h.now()) // nil: the limit, or the machine's total
	return h.capacity.offer(host, h.held.reserved())
}
