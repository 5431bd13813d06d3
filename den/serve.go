package den

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// effective merges the node's own settings with the config collection's:
// the node's (from its file, environment or flags) win.
func (ps *passes) effective(shared queue.SharedConfig) (queueFilter, string) {
	active, ignore := ps.params.ActiveQueues, ps.params.IgnoreQueues
	if len(active) == 0 && len(ignore) == 0 {
		active, ignore = shared.ActiveQueues, shared.IgnoreQueues
	}
	gfs := ps.params.GFS
	if gfs == "" && shared.GFS != nil {
		gfs = *shared.GFS
	}
	if gfs == "" {
		gfs = queue.GFSAuto
	}
	return newQueueFilter(active, ignore), gfs
}

// serveable returns the queues this node claims from: those that the filter
// allows and whose plugin is registered here. It reorders queues so that
// they come first, in the order read, and returns them as the start of
// queues: a node with 80,000 queues keeps one copy of them, not two. Of the queues the filter
// allows, one without a plugin, and one with a nonsense maxthreads, is
// logged once when that starts and once when it is fixed; the queues the
// filter leaves out are no concern of this node's (a node started with
// --activequeues demo says nothing about the others).
func (ps *passes) serveable(queues []queue.Queue, filter queueFilter) []queue.Queue {
	served := make([]bool, len(queues))
	seen := map[string]bool{}
	logged, more := 0, 0 // new problems logged this pass, and past malformedQueuesLogged
	warn := func(msg string, fields ...zap.Field) {
		if logged >= malformedQueuesLogged {
			more++
			return
		}
		logged++
		ps.Log.Warn(msg, fields...)
	}
	for i, q := range queues {
		if !filter.allows(q) {
			continue
		}
		if q.MaxThreadsProblem != "" {
			key := "queue-limit:" + q.ID.Hex()
			seen[key] = true
			if ps.Notes.Set(key, q.MaxThreadsProblem) {
				warn("queue has a bad maxthreads", base.QueueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("problem", q.MaxThreadsProblem))
			}
		}
		p, ok := ps.plugins.Lookup(q.Plugin)
		if g, gated := p.(plugins.Gated); ok && gated && !g.Enabled(ps.params.PluginConfig[q.Plugin]) {
			key := "queue-plugin:" + q.ID.Hex()
			seen[key] = true
			if ps.Notes.Set(key, "disabled") {
				warn("queue skipped: its plugin is off unless this node's configuration enables it",
					base.QueueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("plugin", q.Plugin))
			}
			continue
		}
		if !ok {
			key := "queue-plugin:" + q.ID.Hex()
			seen[key] = true
			if ps.Notes.Set(key, q.Plugin) {
				warn("queue skipped: no plugin of that name is registered in this den binary",
					base.QueueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("plugin", q.Plugin))
			}
			continue
		}
		served[i] = true
	}
	if more > 0 {
		ps.Log.Warn("more queues with a bad maxthreads or a plugin this node does not run (each logged once; den queue list shows them)", zap.Int("queues", more))
	}
	if cleared := ps.Notes.Keep("queue-", seen); len(cleared) > 0 {
		ps.Log.Info("queue problems cleared", zap.Int("count", len(cleared)), zap.Strings("first", firstLabels(cleared, malformedQueuesLogged)))
	}
	return servedFirst(queues, served)
}

// servedFirst moves the queues marked served to the start of queues, in
// their order, the others after them in theirs, and returns the served.
func servedFirst(queues []queue.Queue, served []bool) []queue.Queue {
	var rest []queue.Queue
	n := 0
	for i := range queues {
		if served[i] {
			queues[n] = queues[i]
			n++
		} else {
			rest = append(rest, queues[i])
		}
	}
	copy(queues[n:], rest)
	return queues[:n:n]
}

// serves reports whether this node serves q (serveable, without a word).
func (ps *passes) serves(q queue.Queue, filter queueFilter) bool {
	if !filter.allows(q) {
		return false
	}
	p, ok := ps.plugins.Lookup(q.Plugin)
	if g, gated := p.(plugins.Gated); ok && gated && !g.Enabled(ps.params.PluginConfig[q.Plugin]) {
		return false
	}
	return ok
}

// noteMalformedQueues warns once about each queue document that cannot be a
// queue, when it is first met: the first few by name, the rest of a pass in
// one line (a collection of thousands of them must not flood the log).
func (ps *passes) noteMalformedQueues(malformed []queue.MalformedQueue) {
	seen := map[string]bool{}
	fresh := 0
	for _, b := range malformed {
		key := "malformed-queue:" + fmt.Sprint(b.ID)
		seen[key] = true
		if ps.Notes.Set(key, b.Reason.Error()) {
			fresh++
			ps.Metrics.Malformed.WithLabelValues("queues", "skipped").Inc()
			if fresh <= malformedQueuesLogged {
				ps.Log.Warn("queue document skipped", zap.String("queue_id", metrics.Label(fmt.Sprint(b.ID))), zap.Error(b.Reason))
			}
		}
	}
	if fresh > malformedQueuesLogged {
		ps.Log.Warn("queue documents skipped", zap.Int("count", fresh), zap.Int("named_above", malformedQueuesLogged))
	}
	if cleared := ps.Notes.Keep("malformed-queue:", seen); len(cleared) > 0 {
		ps.Log.Info("queue documents no longer malformed or gone", zap.Int("count", len(cleared)), zap.Strings("first", firstLabels(cleared, malformedQueuesLogged)))
	}
}

// firstLabels is the first max of keys, each cut to a log-sized label.
func firstLabels(keys []string, max int) []string {
	out := make([]string, 0, min(len(keys), max))
	for _, k := range keys[:min(len(keys), max)] {
		out = append(out, metrics.Label(k))
	}
	return out
}

// malformedQueuesLogged is how many malformed queues a pass names, one
// warning each; the rest are counted in one line.
const malformedQueuesLogged = 10
