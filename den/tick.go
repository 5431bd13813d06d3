package den

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// tick is one pass of the loop. A full pass reads the queues, writes the
// node document, carries out cancellations, now and then rescues the tasks
// of dead runners and dead nodes and sweeps malformed tasks, and claims. A
// short pass (full false: a runner has exited, so a slot is free) only
// claims, with what the last full pass read. A MongoDB failure ends the
// pass; it is logged when the outage starts and when it ends.
func (n *Node) tick(ctx context.Context, full bool) {
	// A pass has a deadline, so that one hung connection cannot stop the
	// heartbeat for good.
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := n.now()
	var err error
	if full {
		n.retireIdle(false)
		err = n.pass(pctx)
	} else if !n.claimsPaused() {
		err = n.claim(pctx, false)
	}
	if ctx.Err() != nil {
		return
	}
	kind := "claim"
	if full {
		kind = "full"
	}
	n.metrics.PassSeconds.WithLabelValues(kind).Observe(n.now().Sub(started).Seconds())
	if err != nil {
		n.metrics.DBErrors.Inc()
	}
	if err != nil && pctx.Err() != nil {
		// The pass ran out of time: slow, not necessarily unreachable.
		if n.notes.set("slow", "") {
			n.log.Warn("a pass took longer than its 1-minute limit; the node stays alive and goes on (large documents or a slow server?)",
				zap.Duration("took", n.now().Sub(started)), zap.Error(err))
		}
		return
	}
	if !full {
		if err != nil {
			n.setOutage(err)
		}
		return // a short pass cannot tell that an outage or slowness is over
	}
	if n.notes.clear("slow") {
		n.log.Info("passes finish in time again")
	}
	if err != nil {
		n.setOutage(err)
		return
	}
	n.lastPassOK.Store(n.now().UnixNano())
	n.outage.Store(nil)
	n.metrics.Outage.Set(0)
	if n.notes.clear("outage") {
		n.log.Info("MongoDB reachable again")
	}
	if n.notes.clear("document-fault") {
		n.log.Info("passes read every document again")
	}
}

// setOutage notes that a pass failed on err: MongoDB is unreachable or
// failing until a full pass succeeds. A pass that failed on a document it
// could not read is told apart: that is no outage (the database answered),
// and it is what /readyz then says.
func (n *Node) setOutage(err error) {
	if queue.IsDocumentError(err) {
		msg := "a document den cannot read stopped a pass (MongoDB answered): " + err.Error()
		n.outage.Store(&msg)
		if n.notes.set("document-fault", "") {
			n.log.Warn("a document den cannot read stopped a pass; retrying every interval", zap.Error(err))
		}
		return
	}
	msg := "MongoDB unreachable or failing: " + err.Error()
	n.outage.Store(&msg)
	n.metrics.Outage.Set(1)
	if n.notes.set("outage", "") {
		n.log.Warn("MongoDB unreachable or failing; keeping runners and retrying every interval", zap.Error(err))
	}
}

// pass is a full pass. What it reads, and how often, is chosen so that an
// idle node costs the database about 3 commands a second however many
// queues there are (see docs/performance.md):
//   - every pass: the queues (count_todo tells of new work), the node
//     document, and, while this node holds tasks, its own claimed and
//     running tasks (their cancel flags, and what it holds);
//   - every RefreshEvery: the config collection, and the claimed and
//     running counts of all nodes (tasks_doing in the node document; every
//     pass while a queue-wide threads limit is in play);
//   - every RecheckEvery: one query for work in queues found empty;
//   - every RescueEvery and SweepEvery: rescues and sweeps.
func (n *Node) pass(ctx context.Context) error {
	now := n.now()
	if n.shared == nil || now.Sub(n.sharedAt) >= n.cfg.RefreshEvery {
		shared, err := n.store.ActiveConfig(ctx)
		if err != nil {
			return err // never fall back to serving every queue
		}
		n.shared, n.sharedAt = &shared, now
		if len(shared.Problems) > 0 {
			if n.notes.set("config", strings.Join(shared.Problems, "; ")) {
				n.log.Warn("config collection: bad fields in the active document", zap.Strings("problems", shared.Problems))
			}
		} else if n.notes.clear("config") {
			n.log.Info("config collection: active document is valid again")
		}
	}
	filter, gfs := n.effective(*n.shared)

	queues, bad, err := n.store.Queues(ctx)
	if err != nil {
		return err
	}
	n.noteBadQueues(bad)
	serve := n.serveable(queues, filter)
	if err := n.fillCounts(ctx, queues); err != nil {
		return err
	}

	n.chores = choresPerPass
	rescueDue := now.Sub(n.lastRescue) >= n.cfg.RescueEvery
	var mine []queue.Task
	if n.own.any() || rescueDue {
		sent := n.now()
		if mine, err = n.store.Mine(ctx, n.cfg.Name, false); err != nil {
			return err
		}
		n.own.read(mine, sent, func(t queue.Task) queue.Resources {
			for _, q := range queues {
				if q.ID == t.Queue {
					return requestOf(t.Control.Requested, q)
				}
			}
			return requestOf(t.Control.Requested, queue.Queue{})
		})
	}
	st := &n.claiming
	if st.running == nil || now.Sub(n.runningAt) >= n.cfg.RefreshEvery || n.globalInPlay(serve) {
		running, err := n.store.Running(ctx, queueIDs(queues))
		if err != nil {
			return err
		}
		st.running, n.runningAt = running, now
	}

	entries := n.nodeDocQueues(queues, serve)
	names := make(map[bson.ObjectID]string, len(queues))
	todo := make(map[string]int64, len(queues))
	for _, q := range queues {
		names[q.ID] = q.Name
		if q.CountTodo != nil {
			todo[q.Name] += *q.CountTodo
		}
	}
	n.queueNames.Store(&names)
	n.queueTodo.Store(&todo)
	write := entries
	if slices.Equal(entries, n.nodeQueues) && now.Sub(n.nodeQueuesAt) < n.cfg.RefreshEvery {
		write = nil // unchanged: the timestamp only
	}
	limit, problem, err := n.store.Heartbeat(ctx, n.cfg.Name, write, n.self(ctx, now), now)
	if err != nil {
		return err
	}
	n.lastBeat.Store(now.UnixNano())
	if write != nil {
		n.nodeQueues, n.nodeQueuesAt = entries, now
	}
	if problem != "" {
		if n.notes.set("node-maxthreads", problem) {
			n.log.Warn("node document: " + problem)
		}
	} else if n.notes.clear("node-maxthreads") {
		n.log.Info("node document: maxthreads is valid again")
	}

	byID := make(map[bson.ObjectID]queue.Queue, len(queues))
	for _, q := range queues {
		byID[q.ID] = q
	}
	if err := n.cancel(ctx, mine, byID); err != nil {
		return err
	}
	if mine != nil {
		n.askLive(mine, now)
	}
	if rescueDue {
		if err := n.rescueStaleClaims(ctx, mine, byID, now); err != nil {
			return err
		}
		if err := n.rescueDeadRunners(ctx, mine, byID); err != nil {
			return err
		}
		if err := n.rescueDeadNodes(ctx, byID); err != nil {
			return err
		}
		if n.chores > 0 {
			n.lastRescue = now // else the rest next pass, after its claims
		}
	}
	if now.Sub(n.lastSweep) >= n.cfg.SweepEvery {
		if err := n.sweep(ctx, serve, now); err != nil {
			return err
		}
		if n.chores > 0 {
			n.lastSweep = now // else the rest next pass, after its claims
		}
	}

	st.ready, st.serve, st.limit, st.gfs = true, serve, limit, gfs
	for id := range st.empty {
		if _, served := byID[id]; !served {
			delete(st.empty, id)
		}
	}
	if n.claimsPaused() {
		return nil
	}
	recheck := now.Sub(n.lastRecheck) >= n.cfg.RecheckEvery
	if err := n.claim(ctx, recheck); err != nil {
		return err
	}
	if recheck {
		n.lastRecheck = now
	}
	return nil
}

// choresPerPass is the most housekeeping writes (rescues, sweeps'
// rewrites and fails) one pass makes: the rest wait for the next pass, and
// the pass's claims come first. 10,000 forged tasks of a dead node are
// rescued in 50 passes instead of one pass that never ends.
const choresPerPass = 200

// chore reports whether this pass may make one more housekeeping write,
// and counts it.
func (n *Node) chore() bool {
	if n.chores <= 0 {
		return false
	}
	n.chores--
	return true
}

// NodeQueuesMax is the most queues a node lists in its node document.
// Past it, the node lists the queues it holds tasks of first, then those
// with tasks to do, then the rest by name, and counts what it left out in
// queues_left_out: with 10,000 queues the document stays under 100 KB
// instead of growing to megabytes rewritten every pass.
const NodeQueuesMax = 256

// nodeDocQueues is the queues array of the node document: the queues the
// node serves or holds tasks of (not every queue of the database), each
// as the protocol defines its entry, at most NodeQueuesMax of them.
func (n *Node) nodeDocQueues(queues, serve []queue.Queue) []queue.NodeQueue {
	own, _ := n.own.counts()
	served := make(map[bson.ObjectID]bool, len(serve))
	for _, q := range serve {
		served[q.ID] = true
	}
	st := &n.claiming
	entries := make([]queue.NodeQueue, 0, min(len(serve), NodeQueuesMax))
	rank := make(map[string]int, len(serve))
	for _, q := range queues {
		if !served[q.ID] && own[q.ID] == 0 {
			continue
		}
		others := st.running.Queue(q.ID) - st.running.Node(q.ID, n.cfg.Name)
		e := queue.NewNodeQueue(q, max(others, 0)+own[q.ID])
		switch {
		case own[q.ID] > 0:
			rank[e.ID] = 0
		case e.TasksTodo > 0 || e.TasksDoing > 0:
			rank[e.ID] = 1
		default:
			rank[e.ID] = 2
		}
		entries = append(entries, e)
	}
	n.nodeQueuesLeftOut = 0
	if len(entries) > NodeQueuesMax {
		slices.SortStableFunc(entries, func(a, b queue.NodeQueue) int {
			if c := rank[a.ID] - rank[b.ID]; c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		n.nodeQueuesLeftOut = len(entries) - NodeQueuesMax
		entries = entries[:NodeQueuesMax]
	}
	return entries
}

// fillCounts fills in the counts of queues inserted without them (or with
// counts that are not numbers) from their tasks: a batch of them a pass
// (10 to queue.FillCountsBatch, as fast as the server takes them), in one
// aggregation and one bulk write, so that a pass stays short however many
// such queues there are.
// It logs when there is such work and when it is done, with the queues
// whose counts were not numbers (someone wrote them: worth a look).
func (n *Node) fillCounts(ctx context.Context, queues []queue.Queue) error {
	var todo []queue.Queue
	var bad []string
	for _, q := range queues {
		if q.CountTodo == nil || q.CountTotal == nil {
			todo = append(todo, q)
			if len(q.BadCounts) > 0 && len(bad) < 10 {
				bad = append(bad, fmt.Sprintf("%s (%s: %s)", q.Name, q.ID.Hex(), strings.Join(q.BadCounts, ", ")))
			}
		}
	}
	if len(todo) == 0 {
		if n.notes.clear("fill-counts") {
			n.log.Info("every queue's counts are filled in")
		}
		return nil
	}
	if n.notes.set("fill-counts", "") {
		n.log.Warn("queues without counts (or with counts that are not numbers): counting their tasks, a batch a pass",
			zap.Int("queues", len(todo)), zap.Int("batch", queue.FillCountsBatch), zap.Strings("not_numbers", bad))
	}
	if n.fillBatch == 0 {
		n.fillBatch = fillBatchMin
	}
	start := time.Now()
	_, err := n.store.FillCounts(ctx, todo[:min(len(todo), n.fillBatch)])
	// The batch follows what the server takes: halved when a batch took
	// more than a tenth of the interval, doubled when it took a
	// hundredth, between fillBatchMin and queue.FillCountsBatch. MongoDB
	// updates by _id in microseconds; a server that scans a collection
	// for each update (the development server) takes a second for a
	// few dozen, and a pass must not wait minutes behind them.
	switch took := time.Since(start); {
	case took > n.cfg.Interval/10:
		n.fillBatch = max(n.fillBatch/2, fillBatchMin)
	case took < n.cfg.Interval/100:
		n.fillBatch = min(n.fillBatch*2, queue.FillCountsBatch)
	}
	return err
}

// fillBatchMin is the fewest queues a pass fills the counts of, however
// slow the server.
const fillBatchMin = 10

// globalInPlay reports whether a served queue with a queue-wide threads
// limit may have work: claims in it then need every node's running count
// fresh each pass.
func (n *Node) globalInPlay(serve []queue.Queue) bool {
	for _, q := range serve {
		if q.Global && n.claiming.claimable(q) {
			return true
		}
	}
	return false
}

// effective merges the node's own settings with the config collection's:
// the node's (from its file, environment or flags) win.
func (n *Node) effective(shared queue.SharedConfig) (queueFilter, string) {
	active, ignore := n.cfg.ActiveQueues, n.cfg.IgnoreQueues
	if len(active) == 0 && len(ignore) == 0 {
		active, ignore = shared.ActiveQueues, shared.IgnoreQueues
	}
	gfs := n.cfg.GFS
	if gfs == "" && shared.GFS != nil {
		gfs = *shared.GFS
	}
	if gfs == "" {
		gfs = queue.GFSAuto
	}
	return newQueueFilter(active, ignore), gfs
}

// serveable returns the queues this node claims from: those whose plugin is
// registered here and that the filter allows. A queue without a plugin, and
// a queue with a nonsense maxthreads, is logged once when that starts and
// once when it is fixed.
func (n *Node) serveable(queues []queue.Queue, filter queueFilter) []queue.Queue {
	var out []queue.Queue
	seen := map[string]bool{}
	logged, more := 0, 0 // new problems logged this pass, and past malformedLogged
	warn := func(msg string, fields ...zap.Field) {
		if logged >= malformedLogged {
			more++
			return
		}
		logged++
		n.log.Warn(msg, fields...)
	}
	for _, q := range queues {
		if q.MaxThreadsProblem != "" {
			key := "queue-limit:" + q.ID.Hex()
			seen[key] = true
			if n.notes.set(key, q.MaxThreadsProblem) {
				warn("queue has a bad maxthreads", queueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("problem", q.MaxThreadsProblem))
			}
		}
		p, ok := n.plugins.Lookup(q.Plugin)
		if g, gated := p.(plugins.Gated); ok && gated && !g.Enabled(n.cfg.PluginConfig[q.Plugin]) {
			key := "queue-plugin:" + q.ID.Hex()
			seen[key] = true
			if n.notes.set(key, "disabled") {
				warn("queue skipped: its plugin is off unless this node's configuration enables it",
					queueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("plugin", q.Plugin))
			}
			continue
		}
		if !ok {
			key := "queue-plugin:" + q.ID.Hex()
			seen[key] = true
			if n.notes.set(key, q.Plugin) {
				warn("queue skipped: no plugin of that name is registered in this den binary",
					queueField(q.Name), zap.String("queue_id", q.ID.Hex()), zap.String("plugin", q.Plugin))
			}
			continue
		}
		if filter.allows(q) {
			out = append(out, q)
		}
	}
	if more > 0 {
		n.log.Warn("more queues with a bad maxthreads or a plugin this node does not run (each logged once; den queue list shows them)", zap.Int("queues", more))
	}
	if cleared := n.notes.keep("queue-", seen); len(cleared) > 0 {
		n.log.Info("queue problems cleared", zap.Int("count", len(cleared)), zap.Strings("first", firstLabels(cleared, malformedLogged)))
	}
	return out
}

// noteBadQueues warns once about each queue document that cannot be a
// queue, when it is first met: the first few by name, the rest of a pass in
// one line (a collection of thousands of them must not flood the log).
func (n *Node) noteBadQueues(bad []queue.BadQueue) {
	seen := map[string]bool{}
	fresh := 0
	for _, b := range bad {
		key := "bad-queue:" + fmt.Sprint(b.ID)
		seen[key] = true
		if n.notes.set(key, b.Reason.Error()) {
			fresh++
			n.metrics.Malformed.WithLabelValues("queues", "skipped").Inc()
			if fresh <= malformedLogged {
				n.log.Warn("queue document skipped", zap.String("queue_id", metrics.Label(fmt.Sprint(b.ID))), zap.Error(b.Reason))
			}
		}
	}
	if fresh > malformedLogged {
		n.log.Warn("queue documents skipped", zap.Int("count", fresh), zap.Int("named_above", malformedLogged))
	}
	if cleared := n.notes.keep("bad-queue:", seen); len(cleared) > 0 {
		n.log.Info("queue documents no longer malformed or gone", zap.Int("count", len(cleared)), zap.Strings("first", firstLabels(cleared, malformedLogged)))
	}
}

// sweep cancels the queued tasks whose cancel is set (-5: the claim never
// takes them), fails the malformed tasks of the served queues, notes on
// queued tasks that request more than any node offers why they wait, and
// rewrites start_after and cancel values of other types (epoch seconds,
// date strings, 1, "yes") as the ISODate or boolean the claim and
// cancellation queries match, failing the queued tasks whose value means
// nothing.
func (n *Node) sweep(ctx context.Context, queues []queue.Queue, now time.Time) error {
	if c, err := n.store.CancelQueued(ctx, now); err != nil {
		return err
	} else if c > 0 {
		n.metrics.Cancellations.WithLabelValues("queued").Add(float64(c))
		n.log.Info("cancelled queued tasks", zap.Int64("count", c))
	}
	unfit := n.unfitQuery(ctx, queues)
	tasks, err := n.store.Irregular(ctx, queueIDs(queues), unfit)
	if err != nil {
		return err
	}
	if err := n.normalize(ctx, tasks, now); err != nil {
		return err
	}
	malformed, err := n.store.Malformed(ctx, queueIDs(queues))
	if err != nil {
		return err
	}
	failed := map[bson.ObjectID]int{}
	for _, m := range malformed {
		if !n.chore() {
			break
		}
		ok, err := n.store.FailMalformed(ctx, m, n.cfg.Name, now)
		if err != nil {
			return err
		}
		if ok {
			failed[m.Queue]++
			n.metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			if err := n.store.DecrementTodo(ctx, m.Queue); err != nil {
				return err
			}
		}
	}
	for _, q := range queues {
		if c := failed[q.ID]; c > 0 {
			n.log.Warn("failed malformed tasks (reason in their stderr)", queueField(q.Name), zap.Int("count", c))
		}
	}
	// A note is for people to read: failing to write one must not keep
	// the dependencies below from moving on.
	if err := n.noteUnfit(ctx, queues, unfit, tasks); err != nil {
		if n.notes.set("unfit-notes", err.Error()) {
			n.log.Warn("cannot write why tasks wait (unfit); trying again each sweep", zap.Error(err))
		}
	} else if n.notes.clear("unfit-notes") {
		n.log.Info("writing why tasks wait (unfit) again")
	}
	return n.sweepDependencies(ctx, queueIDs(queues), now)
}

// normalize handles the tasks of the served queues (of those the sweep's
// query returned) whose start_after, cancel or request the claim and
// cancel queries cannot match as they are.
func (n *Node) normalize(ctx context.Context, tasks []queue.Task, now time.Time) error {
	fixed := 0
	for _, t := range tasks {
		if !t.IsIrregular() {
			continue // there for the unfit step
		}
		if !n.chore() {
			break
		}
		bad := t.Unreadable()
		if len(bad) == 0 {
			ok, err := n.store.Normalize(ctx, t)
			if err != nil {
				return err
			}
			if ok {
				fixed++
			}
			continue
		}
		reason := strings.Join(bad, "; ")
		if t.Status != queue.StatusQueued {
			if n.notes.set("irregular:"+t.ID.Hex(), reason) {
				n.log.Warn("a claimed or running task has a field den cannot read; leaving it as it is", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			}
			continue
		}
		ok, err := n.store.FailQueued(ctx, t, n.cfg.Name, reason, now)
		if err != nil {
			return err
		}
		if ok {
			n.metrics.Malformed.WithLabelValues("tasks", "failed").Inc()
			n.log.Warn("failed a task that cannot be run as written (reason in its stderr)", zap.String("task_id", t.ID.Hex()), zap.String("problem", reason))
			if err := n.store.DecrementTodo(ctx, t.Queue); err != nil {
				return err
			}
		}
	}
	if fixed > 0 {
		n.log.Info("rewrote start_after, cancel or requested_resources values as the ISODate, boolean or number they mean", zap.Int("tasks", fixed))
	}
	return nil
}

// firstLabels is the first max of keys, each cut to a log-sized label.
func firstLabels(keys []string, max int) []string {
	out := make([]string, 0, min(len(keys), max))
	for _, k := range keys[:min(len(keys), max)] {
		out = append(out, metrics.Label(k))
	}
	return out
}
