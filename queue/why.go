package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Why a task has not started: reason codes, stable for scripts (den task
// why --json). A queued task may have several; the first is the one that
// holds it first.
const (
	// The task itself.
	WhyClaimed         = "claimed"          // a node claimed it: not waiting
	WhyRunning         = "running"          // it runs: not waiting
	WhyEnded           = "ended"            // it ended: not waiting
	WhyMalformed       = "malformed"        // a field cannot be read: a node fails it
	WhyCancelRequested = "cancel_requested" // cancel: true: it never starts
	WhyDependencies    = "dependencies"     // -4 waiting for tasks to succeed
	WhyHeld            = "held"             // a negative status no node claims (-3, -4 without after, ...)
	WhyStartAfter      = "start_after"      // start_after is in the future
	WhyExpired         = "expired"          // end_before passed: taken, it fails as expired
	WhyUnfit           = "unfit"            // it requests more than any live den node offers
	// Its queue.
	WhyNoQueue        = "no_queue"        // its queue does not exist
	WhyQueueUnusable  = "queue_unusable"  // its queue document cannot be used
	WhyPaused         = "paused"          // its queue is paused
	WhyMaxThreadsZero = "maxthreads_zero" // its queue's limit is 0 (not a pause)
	WhyNoLiveNode     = "no_live_node"    // no node wrote its document within dead_node_after
	WhyNoNodeServes   = "no_node_serves"  // no live node lists the queue: none has its plugin, or none may serve it
	WhyFull           = "full"            // every live node that serves it is at the queue's or its own limit
	WhyRateLimit      = "rate_limit"      // its queue's rate limit is reached until a time
	WhyReady          = "ready"           // nothing holds it: a node takes it when those before it are taken
)

// Reason is one reason a task waits: a stable code and a sentence.
type Reason struct {
	Code string `json:"code"`
	Text string `json:"reason"`
}

// Facts are what the reasons are read from: every queue, every node
// document and the claimed and running tasks, as read at Now. A node is
// live when it wrote its document within DeadAfter and did not say it
// stopped.
type Facts struct {
	Now       time.Time
	DeadAfter time.Duration
	Queues    map[bson.ObjectID]Queue
	// Bad are the queue documents that cannot be used, by _id, with why.
	Bad     map[bson.ObjectID]string
	Nodes   []NodeDoc
	Running Running
	// RateFull are the rate-limited queues at their limit at Now, with
	// when each may start a task again (RateLimits.NextStarts).
	RateFull map[bson.ObjectID]time.Time
}

// ReadFacts reads what the reasons are read from: every queue, every node
// document, and the tasks claimed or running in each queue by node.
func (s *Store) ReadFacts(ctx context.Context, now time.Time, deadAfter time.Duration) (*Facts, error) {
	queues, bad, err := s.Queues(ctx)
	if err != nil {
		return nil, err
	}
	f := &Facts{Now: now, DeadAfter: deadAfter, Queues: map[bson.ObjectID]Queue{}, Bad: map[bson.ObjectID]string{}}
	for _, q := range queues {
		f.Queues[q.ID] = q
	}
	for _, b := range bad {
		if id, ok := b.ID.(bson.ObjectID); ok {
			f.Bad[id] = fmt.Sprint(b.Reason)
		}
	}
	if f.Nodes, err = s.Nodes(ctx); err != nil {
		return nil, err
	}
	if f.Running, err = s.RunningAll(ctx); err != nil {
		return nil, err
	}
	limits := map[bson.ObjectID]RateLimit{}
	for _, q := range queues {
		if q.RateLimit != nil {
			limits[q.ID] = *q.RateLimit
		}
	}
	if f.RateFull, err = NewRateLimits(s.db).NextStarts(ctx, limits, now); err != nil {
		return nil, err
	}
	return f, nil
}

// live reports whether a node counts as alive.
func (f *Facts) live(n NodeDoc) bool {
	return n.Live(f.Now, f.DeadAfter)
}

// QueueReasons are the reasons no task of q starts, whatever the task:
// paused, a limit of 0, no live node, no live node serving it, every
// serving node full. None: a node takes its tasks.
func (f *Facts) QueueReasons(q Queue) []Reason {
	var out []Reason
	switch {
	case q.Paused != nil:
		out = append(out, Reason{WhyPaused, fmt.Sprintf("queue %s is paused%s (den queue resume %s)", ShownName(q.Name), pausedSince(*q.Paused), commandRef(q))})
	case q.MaxThreads == 0 && q.Global:
		out = append(out, Reason{WhyMaxThreadsZero, fmt.Sprintf("queue %s has threads 0: no task of it runs (den queue set %s threads=N)", ShownName(q.Name), commandRef(q))})
	case q.MaxThreads == 0:
		why := "maxthreads 0"
		if q.MaxThreadsProblem != "" {
			why = q.MaxThreadsProblem
		}
		out = append(out, Reason{WhyMaxThreadsZero, fmt.Sprintf("queue %s has %s: no task of it runs (den queue set %s maxthreads=N)", ShownName(q.Name), why, commandRef(q))})
	}
	var live, serving []NodeDoc
	unsure := false // a live node left queues out of its document
	for _, n := range f.Nodes {
		if !f.live(n) {
			continue
		}
		live = append(live, n)
		if n.Serves(q.ID) {
			serving = append(serving, n)
		} else if n.QueuesLeftOut > 0 {
			unsure = true
		}
	}
	switch {
	case len(live) == 0:
		out = append(out, Reason{WhyNoLiveNode, fmt.Sprintf("no node is alive: none wrote its node document in the last %s", f.DeadAfter)})
	case len(serving) == 0 && !unsure:
		out = append(out, Reason{WhyNoNodeServes, fmt.Sprintf("none of the %d live nodes serves queue %s: none has its plugin %s, or activequeues/ignorequeues leave it out", len(live), ShownName(q.Name), q.Plugin)})
	case len(serving) > 0 && q.MaxThreads > 0 && f.full(q, serving):
		out = append(out, Reason{WhyFull, f.fullText(q, serving)})
	}
	if next, full := f.RateFull[q.ID]; full && q.RateLimit != nil && next.After(f.Now) {
		out = append(out, Reason{WhyRateLimit, fmt.Sprintf("queue %s is at its rate limit (%d starts in any %s, on all den nodes): the next start may come at %s, %s from now",
			ShownName(q.Name), q.RateLimit.Starts, q.RateLimit.Per, next.UTC().Format("2006-01-02T15:04:05.000Z07:00"), next.Sub(f.Now).Round(100*time.Millisecond))})
	}
	return out
}

// full reports whether every serving node is at the queue's limit or its
// own, or the queue at its limit on all nodes (threads).
func (f *Facts) full(q Queue, serving []NodeDoc) bool {
	if q.Global && f.Running.Queue(q.ID) >= q.MaxThreads {
		return true
	}
	for _, n := range serving {
		queueFull := !q.Global && f.Running.Node(q.ID, n.Name) >= q.MaxThreads
		nodeFull := n.MaxThreads != nil && f.Running.NodeTotal(n.Name) >= *n.MaxThreads
		if n.MaxThreadsProblem != "" {
			nodeFull = true
		}
		if !queueFull && !nodeFull {
			return false
		}
	}
	return true
}

func (f *Facts) fullText(q Queue, serving []NodeDoc) string {
	running := f.Running.Queue(q.ID)
	if q.Global && running >= q.MaxThreads {
		return fmt.Sprintf("queue %s is full: %d of its tasks are claimed or running, its threads limit on all nodes is %d", ShownName(q.Name), running, q.MaxThreads)
	}
	names := make([]string, len(serving))
	for i, n := range serving {
		names[i] = n.Name
	}
	return fmt.Sprintf("queue %s is full on every live node that serves it (%s): %d of its tasks are claimed or running; each node runs at most %d of them (maxthreads) and no more than its own node maxthreads",
		ShownName(q.Name), strings.Join(names, ", "), running, q.MaxThreads)
}

// commandRef is how a reason's den command names queue q: by its name,
// or by its id when the name is not one den takes (too long, 24
// hexadecimal digits: CheckQueueName).
func commandRef(q Queue) string {
	if CheckQueueName(q.Name) != nil {
		return q.ID.Hex()
	}
	return q.Name
}

func pausedSince(p Pause) string {
	var s string
	if !p.At.IsZero() {
		s += " since " + p.At.UTC().Format(time.RFC3339)
	}
	if p.By != "" {
		s += " by " + p.By
	}
	return s
}

// TaskReasons are the reasons task t has not started, from the task
// itself first, then its queue (QueueReasons). A task not waiting (claimed,
// running, ended) has that one reason. An empty list: nothing holds it
// (see Why, which then says how many go before it).
func (f *Facts) TaskReasons(t Task) []Reason {
	if !t.StatusOK {
		return []Reason{{WhyMalformed, fmt.Sprintf("its status is %s, not a number: a node fails it", describe(t.Raw.Lookup("status")))}}
	}
	switch {
	case t.Status == StatusClaimed:
		return []Reason{{WhyClaimed, fmt.Sprintf("claimed by node %s: not waiting", t.Node)}}
	case t.Status == StatusRunning:
		return []Reason{{WhyRunning, fmt.Sprintf("running on node %s: not waiting", t.Node)}}
	case Ended(t.Status):
		return []Reason{{WhyEnded, fmt.Sprintf("it ended (%d %s): not waiting", t.Status, StatusName(t.Status))}}
	}
	var out []Reason
	if len(t.Problems) > 0 {
		out = append(out, Reason{WhyMalformed, "a node fails it, not run: " + strings.Join(t.Problems, "; ")})
	}
	if t.Cancel {
		out = append(out, Reason{WhyCancelRequested, "cancel is requested: it never starts, and a node records status -5 at its next sweep"})
	}
	switch {
	case t.Status == StatusBlocked && t.Raw.Lookup(FieldAfter).Type != 0:
		waiting := t.Raw.Lookup(FieldWaiting)
		if arr, ok := waiting.ArrayOK(); ok {
			vals, _ := arr.Values()
			ids := make([]string, 0, len(vals))
			for _, v := range vals {
				if id, ok := v.ObjectIDOK(); ok {
					ids = append(ids, id.Hex())
				}
			}
			out = append(out, Reason{WhyDependencies, fmt.Sprintf("waiting (status -4) for %d task(s) to succeed: %s", len(ids), strings.Join(ids, ", "))})
		} else {
			out = append(out, Reason{WhyDependencies, "waiting (status -4) for the tasks in its after list; a den node registers them at its next sweep"})
		}
	case t.Status != StatusQueued:
		out = append(out, Reason{WhyHeld, fmt.Sprintf("its status is %d (%s): held back, no node claims it until it is -2", t.Status, StatusName(t.Status))})
	}
	if t.StartAfter.After(f.Now) {
		out = append(out, Reason{WhyStartAfter, fmt.Sprintf("start_after is %s, %s from now", t.StartAfter.UTC().Format(time.RFC3339), t.StartAfter.Sub(f.Now).Round(time.Second))})
	}
	if !t.EndBefore.IsZero() && !t.EndBefore.After(f.Now) {
		out = append(out, Reason{WhyExpired, fmt.Sprintf("its end_before (%s) passed: a node that takes it fails it as expired", t.EndBefore.UTC().Format(time.RFC3339))})
	}
	if t.Status == StatusQueued && t.Unfit != "" {
		out = append(out, Reason{WhyUnfit, t.Unfit})
	}
	q, ok := f.Queues[t.Queue]
	switch {
	case ok:
		out = append(out, f.QueueReasons(q)...)
	case f.Bad[t.Queue] != "":
		out = append(out, Reason{WhyQueueUnusable, fmt.Sprintf("its queue %s cannot be used: %s", t.Queue.Hex(), f.Bad[t.Queue])})
	default:
		out = append(out, Reason{WhyNoQueue, fmt.Sprintf("its queue %s does not exist", describe(t.Raw.Lookup("queue")))})
	}
	return out
}

// Why is every reason task t has not started (TaskReasons); when nothing
// holds it, one reason, ready, with how many claimable tasks of its queue
// a claim takes before it: those of higher priority (when there are, or
// it has one), then those of its priority before it in the queue's order.
func (s *Store) Why(ctx context.Context, f *Facts, t Task) ([]Reason, error) {
	if r := f.TaskReasons(t); len(r) > 0 {
		return r, nil
	}
	q := f.Queues[t.Queue]
	prio := PriorityOf(t.Raw.Lookup(FieldPriority))
	higher, err := countUpTo(ctx, s.tasks, append(ClaimFilter(f.Now, nil, q.ID), higherPriority(prio)))
	if err != nil {
		return nil, fmt.Errorf("count the tasks of higher priority than %s: %w", t.ID.Hex(), err)
	}
	filter := append(ClaimFilter(f.Now, nil, q.ID), samePriority(prio))
	text := "nothing holds it: a live node serving queue " + q.Name + " takes it"
	ofPrio, andPrio := "", ""
	if higher > 0 || prio != 0 {
		text += fmt.Sprintf(" after the %s queued tasks of higher priority than its %s, then", countedUpTo(higher), strconv.FormatFloat(prio, 'f', -1, 64))
		ofPrio, andPrio = " of its priority", " and of its priority"
	}
	switch q.Sort {
	case SortFIFO, SortLIFO:
		op := "$lt"
		if q.Sort == SortLIFO {
			op = "$gt"
		}
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: op, Value: t.ID}}})
		n, err := countUpTo(ctx, s.tasks, filter)
		if err != nil {
			return nil, fmt.Errorf("count the tasks before %s: %w", t.ID.Hex(), err)
		}
		text += fmt.Sprintf(" after the %s%s queued before it (%s)", countedUpTo(n), ofPrio, q.Sort)
	default:
		n, err := countUpTo(ctx, s.tasks, filter)
		if err != nil {
			return nil, fmt.Errorf("count the tasks of queue %s: %w", q.Name, err)
		}
		text += fmt.Sprintf("; %s tasks of the queue%s can start now, taken in the server's order", countedUpTo(n), andPrio)
	}
	return []Reason{{WhyReady, text}}, nil
}

// WhyCounted is the most tasks Why counts ahead of a task: past it, it
// says "1000 or more". The count is a read any viewer of a queue's page
// starts; on the development server, where no index serves the claim's
// whole filter, it reads each task it counts.
const WhyCounted = 1000

// countUpTo counts the tasks filter matches, up to WhyCounted+1.
func countUpTo(ctx context.Context, tasks *mongo.Collection, filter bson.D) (int64, error) {
	return tasks.CountDocuments(ctx, filter, options.Count().SetLimit(WhyCounted+1))
}

// countedUpTo is a count of countUpTo as Why says it.
func countedUpTo(n int64) string {
	if n > WhyCounted {
		return fmt.Sprintf("%d or more", WhyCounted)
	}
	return strconv.FormatInt(n, 10)
}

// Serves reports whether a node document lists queue id among the queues
// its node serves (or holds tasks of).
func (n NodeDoc) Serves(id bson.ObjectID) bool {
	hex := id.Hex()
	return slices.ContainsFunc(n.Queues, func(e NodeQueue) bool { return e.ID == hex })
}

// OldestReady returns when the oldest task (by _id) that a claim of queueID
// could take at now became ready (ReadyAt), and false when there is none.
// One query, served by the claim's index.
func (s *Store) OldestReady(ctx context.Context, queueID bson.ObjectID, now time.Time) (time.Time, bool, error) {
	raw, err := s.tasks.FindOne(ctx, ClaimFilter(now, nil, queueID), options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "ctime", Value: 1}, {Key: FieldStartAfter, Value: 1}, {Key: FieldHistory + ".ended", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("find the oldest ready task of queue %s: %w", queueID.Hex(), err)
	}
	var t Task
	if id, ok := raw.Lookup("_id").ObjectIDOK(); ok {
		t.ID = id
	}
	t.Ctime, _ = timeValue(raw.Lookup("ctime"))
	t.StartAfter, _ = timeValue(raw.Lookup(FieldStartAfter))
	ready := readyAt(t, lastEnded(raw))
	return ready, true, nil
}

// lastEnded is the ended time of the last entry of a task's history
// (zero: none).
func lastEnded(raw bson.Raw) time.Time {
	arr, ok := raw.Lookup(FieldHistory).ArrayOK()
	if !ok {
		return time.Time{}
	}
	vals, _ := arr.Values()
	if len(vals) == 0 {
		return time.Time{}
	}
	d, ok := vals[len(vals)-1].DocumentOK()
	if !ok {
		return time.Time{}
	}
	at, _ := timeValue(d.Lookup("ended"))
	return at
}

// ReadyAt is when a task could first start, for the time it waited
// (den_task_wait_seconds): the latest of its creation (ctime, else its
// _id's time), its start_after, and the end of its last run when it was
// retried (an operator's retry counts from that end too).
func ReadyAt(t Task) time.Time {
	return readyAt(t, lastEnded(t.Raw))
}

// readyAt is ReadyAt of a task whose last run ended at ended (zero: none).
func readyAt(t Task, ended time.Time) time.Time {
	ready := t.Ctime
	if ready.IsZero() {
		ready = t.ID.Timestamp()
	}
	if t.StartAfter.After(ready) {
		ready = t.StartAfter
	}
	if ended.After(ready) {
		ready = ended
	}
	return ready
}
