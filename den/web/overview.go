package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// throughputWindow is the window of the queues' "finished lately" column.
const throughputWindow = 15 * time.Minute

type queueView struct {
	ID, Name, Plugin, Limit, Sort   string
	Todo, Running, Done, Failed     int64
	Cancelled                       int64
	RecentDone, RecentFailed        int64
	PerMinute                       string
	Problem                         string
	TasksURL, RunningURL, FailedURL string
	// Paused says since when and by whom, when the queue is paused
	// (Limit is then the limit it resumes with).
	Paused string
	// Unserved says why no live node can serve the queue (no live node,
	// or none serves it); empty when one can.
	Unserved string
	// RateLimit is its rate limit as den queue set takes it (2/10s), and
	// RateTitle what it means; empty: none.
	RateLimit, RateTitle string
}

// deletedShown is how many deleted queues the overview lists (den status
// lists them all).
const deletedShown = 20

// deletedView is a deleted queue's row: tasks name its id, no queue
// document has it. TasksURL lists its tasks, where the ended ones are
// archived or purged (the task list's bulk actions).
type deletedView struct {
	ID                          string
	Todo, Running, Done, Failed int64
	Cancelled                   int64
	TasksURL                    string
}

type nodeView struct {
	Name      string
	Heartbeat time.Time
	Dead      bool
	// State is running, stopped or dead (queue.NodeDoc.State).
	State string
	// Quiet is set for a quiet node (den node quiet: it claims nothing
	// new; nodeactions.go, queue.NodeDoc.Quiet), with the maxthreads it
	// resumes with and since when and by whom (QuietTitle); MaxThreads
	// is then 0.
	Quiet               bool
	Resumes, QuietTitle string
	MaxThreads          string
	Limit               string // the form's current value: a number, or empty
	Problem             string
	Running             int
	PerQueue            []perQueue
	Version             string
	Info                nodeInfo
	TasksURL            string
}

type perQueue struct {
	Name    string
	Running int
}

type failureView struct {
	Task      queue.Task
	QueueName string
	Reason    string // the last line of stderr
}

type overviewData struct {
	Database string
	// Counted says how old the counts are (the census), Window the
	// window of the "finished lately" column.
	Counted string
	Window  string
	Queues  []queueView
	// Deleted are the deleted queues (queue.Census.Deleted), at most
	// deletedShown, and DeletedMore how many more there are.
	Deleted     []deletedView
	DeletedMore int
	Bad         []string
	Nodes       []nodeView
	Failures    []failureView
	Charts      chartsData
}

// overviewReads is what the overview page reads from the database, in one
// place, so that building the page is a function of it alone.
type overviewReads struct {
	queues   []queue.Queue
	bad      []queue.MalformedQueue
	census   *queue.Census
	recent   map[bson.ObjectID]queue.StatusCounts
	running  queue.Running
	nodes    []queue.NodeDoc
	failures []queue.Task
	points   []queue.StatPoint
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	now := h.now()
	rng := rangeOf(r.URL.Query().Get("range"))
	in, err := h.readOverview(r.Context(), now, rng)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	d := buildOverview(in, h.db.Name(), now, h.dead, rng)
	h.render(w, r, "overview", page{Title: "Status", Nav: "overview", Refresh: int(h.refresh.Seconds()), Data: d})
}

// readOverview makes the overview's reads, stopping at the first that
// fails. Each costs what the queues or the nodes cost, never what the
// tasks kept cost: the queues; the census (the counts by status, made at
// most countsAge ago, once for every viewer); the tasks claimed and
// running; the nodes; the census's last failures, by _id; and the stats
// (what den nodes finished, by minute: the "finished lately" column, and
// the charts).
func (h *handler) readOverview(ctx context.Context, now time.Time, rng chartRange) (overviewReads, error) {
	var in overviewReads
	var err error
	if in.queues, in.bad, err = h.store.Queues(ctx); err != nil {
		return in, err
	}
	if in.census, err = h.census.Take(ctx, h.countsAge); err != nil {
		return in, err
	}
	if in.running, err = h.store.RunningAll(ctx); err != nil {
		return in, err
	}
	if in.nodes, err = h.store.Nodes(ctx); err != nil {
		return in, err
	}
	if in.failures, err = h.store.TasksByID(ctx, in.census.Failures); err != nil {
		return in, err
	}
	if in.points, err = h.store.Stats(ctx, queue.StatsQuery{Step: rng.Step, Since: rng.buckets(now)[0]}); err != nil {
		return in, err
	}
	// What finished lately is in the charts' points when they are by the
	// minute (the default range, an hour); else in a read of its own.
	lately := in.points
	if rng.Step != time.Minute || rng.buckets(now)[0].After(now.Add(-throughputWindow)) {
		if lately, err = h.store.Stats(ctx, queue.StatsQuery{Step: time.Minute, Since: now.Add(-throughputWindow), Kind: queue.StatQueue}); err != nil {
			return in, err
		}
	}
	in.recent = finishedLately(lately, now.Add(-throughputWindow))
	return in, nil
}

// finishedLately adds up, by queue, the tasks den nodes finished in the
// given stats points by the minute from since on (succeeded as status 1,
// failed as 2), for the "finished lately" column.
func finishedLately(points []queue.StatPoint, since time.Time) map[bson.ObjectID]queue.StatusCounts {
	out := map[bson.ObjectID]queue.StatusCounts{}
	for _, p := range points {
		if p.Kind != queue.StatQueue || p.Queue.IsZero() || p.T.Before(since.Truncate(time.Minute)) {
			continue
		}
		c, ok := out[p.Queue]
		if !ok {
			c = queue.StatusCounts{ByStatus: map[int]int64{}}
		}
		c.ByStatus[queue.StatusSucceeded] += p.Succeeded
		c.ByStatus[queue.StatusFailed] += p.Failed
		out[p.Queue] = c
	}
	return out
}

// buildOverview turns the overview's reads into the page's data.
func buildOverview(in overviewReads, database string, now time.Time, dead time.Duration, rng chartRange) overviewData {
	names := map[bson.ObjectID]string{}
	for _, q := range in.queues {
		names[q.ID] = queue.ShownName(q.Name)
	}
	facts := &queue.Facts{Now: now, DeadAfter: dead, Nodes: in.nodes, Running: in.running}
	d := overviewData{Database: database, Window: "15m", Counted: countedText(in.census, now)}
	queues := in.queues
	sort.SliceStable(queues, func(i, j int) bool { return queues[i].Name < queues[j].Name })
	for _, q := range queues {
		d.Queues = append(d.Queues, queueViewOf(q, in.census.Queues[q.ID], in.recent[q.ID], facts.QueueReasons(q)))
	}
	d.Charts = overviewCharts(rng, now, queues, in.points)
	d.Deleted, d.DeletedMore = deletedViews(in.census.Deleted(in.queues, in.bad))
	for _, b := range in.bad {
		d.Bad = append(d.Bad, fmt.Sprintf("queue %v cannot be used: %v", b.ID, b.Reason))
	}
	for _, n := range in.nodes {
		d.Nodes = append(d.Nodes, nodeViewOf(n, now, dead, in.running, names))
	}
	for _, t := range in.failures {
		d.Failures = append(d.Failures, failureView{Task: t, QueueName: names[t.Queue], Reason: human.LastLine(t, 100, "(in GridFS)")})
	}
	return d
}

// deletedViews are the deleted queues' rows, the newest deletedShown, and
// how many more there are.
func deletedViews(deleted []queue.DeletedQueue) ([]deletedView, int) {
	var out []deletedView
	for _, q := range deleted[:min(len(deleted), deletedShown)] {
		c := q.Counts
		out = append(out, deletedView{ID: q.ID.Hex(), Todo: c.Group(queue.GroupTodo), Running: c.Group(queue.GroupRunning),
			Done: c.Group(queue.GroupDone), Failed: c.Group(queue.GroupFailed), Cancelled: c.Group(queue.GroupCancelled),
			TasksURL: taskListURL(q.ID.Hex(), "", "")})
	}
	return out, len(deleted) - len(out)
}

// queueViewOf is one queue's row: its counts, its limit as the page says
// it, and why no node serves it when none does.
func queueViewOf(q queue.Queue, c, rc queue.StatusCounts, reasons []queue.Reason) queueView {
	v := queueView{ID: q.ID.Hex(), Name: queue.ShownName(q.Name), Plugin: q.Plugin, Sort: q.Sort, Problem: q.MaxThreadsProblem,
		Todo: c.Group(queue.GroupTodo), Running: c.Group(queue.GroupRunning), Done: c.Group(queue.GroupDone),
		Failed: c.Group(queue.GroupFailed), Cancelled: c.Group(queue.GroupCancelled),
		RecentDone: rc.Group(queue.GroupDone), RecentFailed: rc.Group(queue.GroupFailed),
		TasksURL:   taskListURL(q.ID.Hex(), "", ""),
		RunningURL: taskListURL(q.ID.Hex(), "claimed,running", ""),
		FailedURL:  taskListURL(q.ID.Hex(), "failed,orphaned", ""),
	}
	v.Limit, v.Paused = queueLimit(q)
	v.RateLimit, v.RateTitle = rateLimitText(q.RateLimit)
	v.Unserved = unservedText(reasons)
	v.PerMinute = fmt.Sprintf("%.1f/min", float64(rc.Total())/throughputWindow.Minutes())
	return v
}

// queueLimit is the limit a queue's row shows, and since when and by whom
// it is paused (empty when it is not).
func queueLimit(q queue.Queue) (limit, paused string) {
	if q.Paused != nil {
		return q.Paused.Limit(), pausedText(*q.Paused)
	}
	if q.Global {
		return strconv.Itoa(q.MaxThreads) + " on all nodes", ""
	}
	return strconv.Itoa(q.MaxThreads) + " per node", ""
}

// rateLimitText is a queue's rate limit as den queue set takes it
// (2/10s) and what it means, or empty when it has none.
func rateLimitText(l *queue.RateLimit) (text, title string) {
	if l == nil {
		return "", ""
	}
	return l.String(), fmt.Sprintf("rate limit: at most %d of its tasks start in any %s, on all den nodes together", l.Starts, l.Per)
}

// unservedText is the last reason that says no live node can serve a
// queue, or empty.
func unservedText(reasons []queue.Reason) string {
	text := ""
	for _, why := range reasons {
		if why.Code == queue.WhyNoLiveNode || why.Code == queue.WhyNoNodeServes {
			text = why.Text
		}
	}
	return text
}

// nodeViewOf is one node's row: its state, its limit as the page says it,
// and what it runs per queue.
func nodeViewOf(n queue.NodeDoc, now time.Time, dead time.Duration, running queue.Running, names map[bson.ObjectID]string) nodeView {
	v := nodeView{Name: n.Name, Heartbeat: n.Timestamp, Problem: n.MaxThreadsProblem, Version: n.Version,
		Info: nodeInfoOf(n), TasksURL: taskListURL("", "claimed,running", n.Name)}
	v.State = n.State(now, dead)
	v.Dead = v.State == queue.NodeDead
	if q := n.Quiet(); q != nil {
		v.Quiet, v.Resumes, v.QuietTitle = true, q.Limit(), quietText(*q)
	}
	v.MaxThreads, v.Limit = nodeLimit(n.MaxThreads, n.MaxThreadsProblem)
	for qid, byNode := range running {
		if c := byNode[n.Name]; c > 0 {
			v.PerQueue = append(v.PerQueue, perQueue{Name: names[qid], Running: c})
			v.Running += c
		}
	}
	sort.Slice(v.PerQueue, func(i, j int) bool { return v.PerQueue[i].Name < v.PerQueue[j].Name })
	return v
}

// nodeLimit is a node's maxthreads as its row says it, and the value its
// form starts with.
func nodeLimit(maxThreads *int, problem string) (shown, form string) {
	shown = "none"
	if maxThreads != nil {
		shown = strconv.Itoa(*maxThreads)
		form = shown
	}
	if problem != "" {
		shown = "invalid (0)"
	}
	return shown, form
}

// taskListURL links to the task list with filters.
func taskListURL(queueID, status, node string) string {
	v := url.Values{}
	if queueID != "" {
		v.Set("queue", queueID)
	}
	if status != "" {
		v.Set("status", status)
	}
	if node != "" {
		v.Set("node", node)
	}
	if len(v) == 0 {
		return "/tasks"
	}
	return "/tasks?" + v.Encode()
}

// pausedText says when and by whom a queue was paused.
func pausedText(p queue.Pause) string {
	s := "paused"
	if !p.At.IsZero() {
		s += " at " + p.At.UTC().Format(time.RFC3339)
	}
	if p.By != "" {
		s += " by " + p.By
	}
	return s
}

// countedText says how old a census is, for the pages: "counted 3s ago
// (took 40ms)".
func countedText(c *queue.Census, now time.Time) string {
	if c == nil || c.At.IsZero() {
		return "not counted yet"
	}
	age := c.Age(now).Round(time.Second)
	if age < 0 {
		age = 0
	}
	return fmt.Sprintf("counted %s ago (took %s)", age, c.Took.Round(time.Millisecond))
}
