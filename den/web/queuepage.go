package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// queueRecentShown is how many of a queue's newest tasks its page lists;
// queueRateOf how many of its last ended tasks the failure rate is taken
// from (queue.LastEnded).
const (
	queueRecentShown = 50
	queueRateOf      = 100
)

type statusCount struct {
	Status int
	Name   string
	Group  string
	N      int64
}

type queuePageData struct {
	// Counted says how old Counts are (the census).
	Counted  string
	Queue    queueView
	Sort     string
	Problem  string
	Counts   []statusCount
	Other    int64
	Total    int64
	Recent   []taskRow
	RecentOf int
	// Rate is the failure rate, as text, over Sample ended tasks
	// (Failed of them); empty when none ended.
	Rate           string
	Sample, Failed int
	// Why says why its waiting tasks wait (queue/why.go); WhyTask is the
	// task it was asked of, when the queue itself holds none back.
	Why     []queue.Reason
	WhyTask string
	Waiting int64
	// ReadAgo says how old the why of WhyTask and the failure rate are
	// (queueReadsAge: read once for every viewer).
	ReadAgo string
	// Charts are its throughput, backlog, wait and run times over the
	// range asked for (?range=).
	Charts queuePageCharts
}

// taskRow is a task in a page's short list.
type taskRow struct {
	Task      queue.Task
	QueueName string
}

// queuePage serves GET /queues/REF, REF a queue's name or id: its counts,
// settings, pause and resume, newest tasks, failure rate and why its
// waiting tasks wait.
func (h *handler) queuePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ref := r.PathValue("ref")
	q, problem, err := h.store.FindQueue(ctx, ref)
	switch {
	case errors.Is(err, queue.ErrNoQueue):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no queue is named %q or has that id", ref))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	census, err := h.census.Take(ctx, h.countsAge, q.ID)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	recent, err := h.store.ListTasks(ctx, queue.TaskFilter{Queues: []bson.ObjectID{q.ID}, Limit: queueRecentShown})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	facts, err := h.store.ReadFacts(ctx, h.now(), h.dead)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	c := census.Queues[q.ID]
	waiting := c.Group(queue.GroupTodo)
	reasons := facts.QueueReasons(q)
	shared, err := h.queueReadsOf(ctx, q, facts, waiting > 0 && len(reasons) == 0)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	rng := rangeOf(r.URL.Query().Get("range"))
	points, err := h.store.Stats(ctx, queue.StatsQuery{Step: rng.Step, Since: rng.buckets(h.now())[0], Kind: queue.StatQueue, Queue: q.ID})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	d := queuePageData{Counted: countedText(census, h.now()), Queue: queueView{ID: q.ID.Hex(), Name: queue.ShownName(q.Name), Plugin: q.Plugin, Problem: q.MaxThreadsProblem,
		TasksURL: taskListURL(q.ID.Hex(), "", "")}, Sort: q.Sort, Other: c.Other, Total: c.Total(), RecentOf: queueRecentShown}
	if problem != nil {
		d.Problem = problem.Error()
	}
	d.Charts = queuePageChartsOf(rng, h.now(), q.ID, points)
	d.Queue.Limit, d.Queue.Paused = queueLimit(q)
	d.Queue.RateLimit, d.Queue.RateTitle = rateLimitText(q.RateLimit)
	for st, n := range c.ByStatus {
		d.Counts = append(d.Counts, statusCount{Status: st, Name: queue.StatusName(st), Group: queue.StatusGroup(st), N: n})
	}
	sort.Slice(d.Counts, func(i, j int) bool { return d.Counts[i].Status < d.Counts[j].Status })
	d.Waiting = waiting
	d.ReadAgo = human.Ago(h.now(), shared.at)
	for _, t := range recent {
		d.Recent = append(d.Recent, taskRow{Task: t, QueueName: queue.ShownName(q.Name)})
	}
	for _, t := range shared.ended {
		d.Sample++
		if queue.StatusGroup(t.Status) == queue.GroupFailed {
			d.Failed++
		}
	}
	if d.Sample > 0 {
		d.Rate = fmt.Sprintf("%.0f%%", 100*float64(d.Failed)/float64(d.Sample))
	}
	if d.Waiting > 0 {
		d.Why = reasons
		if len(reasons) == 0 {
			d.Why, d.WhyTask = shared.why, shared.whyTask
		}
	}
	h.render(w, r, "queue", page{Title: "Queue " + queue.ShownName(q.Name), Nav: "overview", Refresh: int(h.refresh.Seconds()), Data: d})
}

// queueURL is a queue's page, by its id (a name may be shared or look
// like another queue's id).
func queueURL(id string) string { return "/queues/" + url.PathEscape(id) }

// nodeURL is a node's page.
func nodeURL(name string) string { return "/nodes/" + url.PathEscape(name) }
