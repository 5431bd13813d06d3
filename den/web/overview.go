package web

import (
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

// failuresShown is how many recent failures the overview lists.
const failuresShown = 10

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
}

type nodeView struct {
	Name      string
	Heartbeat time.Time
	Dead      bool
	// State is running, stopped or dead (queue.NodeDoc.State).
	State      string
	MaxThreads string
	Limit      string // the form's current value: a number, or empty
	Problem    string
	Running    int
	PerQueue   []perQueue
	Version    string
	Info       nodeInfo
	TasksURL   string
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
	Window   string
	Queues   []queueView
	Bad      []string
	Nodes    []nodeView
	Failures []failureView
	Charts   chartsData
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := h.now()
	queues, bad, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	counts, err := h.store.TaskCounts(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	recent, err := h.store.EndedSince(ctx, now.Add(-throughputWindow))
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	ids := make([]bson.ObjectID, 0, len(queues))
	names := map[bson.ObjectID]string{}
	for _, q := range queues {
		ids = append(ids, q.ID)
		names[q.ID] = q.Name
	}
	running, err := h.store.Running(ctx, ids)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	nodes, err := h.store.Nodes(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	failures, err := h.store.RecentFailures(ctx, failuresShown)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	rng := rangeOf(r.URL.Query().Get("range"))
	points, err := h.store.Stats(ctx, queue.StatsQuery{Step: rng.Step, Since: rng.buckets(now)[0]})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	facts := &queue.Facts{Now: now, DeadAfter: h.dead, Nodes: nodes, Running: running}
	d := overviewData{Database: h.db.Name(), Window: "15m"}
	sort.SliceStable(queues, func(i, j int) bool { return queues[i].Name < queues[j].Name })
	for _, q := range queues {
		c, rc := counts[q.ID], recent[q.ID]
		v := queueView{ID: q.ID.Hex(), Name: q.Name, Plugin: q.Plugin, Sort: q.Sort, Problem: q.MaxThreadsProblem,
			Todo: c.Group(queue.GroupTodo), Running: c.Group(queue.GroupRunning), Done: c.Group(queue.GroupDone),
			Failed: c.Group(queue.GroupFailed), Cancelled: c.Group(queue.GroupCancelled),
			RecentDone: rc.Group(queue.GroupDone), RecentFailed: rc.Group(queue.GroupFailed),
			TasksURL:   taskListURL(q.ID.Hex(), "", ""),
			RunningURL: taskListURL(q.ID.Hex(), "claimed,running", ""),
			FailedURL:  taskListURL(q.ID.Hex(), "failed,orphaned", ""),
		}
		v.Limit = strconv.Itoa(q.MaxThreads) + " per node"
		if q.Global {
			v.Limit = strconv.Itoa(q.MaxThreads) + " on all nodes"
		}
		if q.Paused != nil {
			v.Limit, v.Paused = q.Paused.Limit(), pausedText(*q.Paused)
		}
		for _, why := range facts.QueueReasons(q) {
			if why.Code == queue.WhyNoLiveNode || why.Code == queue.WhyNoNodeServes {
				v.Unserved = why.Text
			}
		}
		v.PerMinute = fmt.Sprintf("%.1f/min", float64(rc.Total())/throughputWindow.Minutes())
		d.Queues = append(d.Queues, v)
	}
	d.Charts = overviewCharts(rng, now, queues, points)
	for _, b := range bad {
		d.Bad = append(d.Bad, fmt.Sprintf("queue %v cannot be used: %v", b.ID, b.Reason))
	}
	for _, n := range nodes {
		v := nodeView{Name: n.Name, Heartbeat: n.Timestamp, Problem: n.MaxThreadsProblem, Version: n.Version,
			Info: nodeInfoOf(n), MaxThreads: "none", TasksURL: taskListURL("", "claimed,running", n.Name)}
		v.State = n.State(now, h.dead)
		v.Dead = v.State == queue.NodeDead
		if n.MaxThreads != nil {
			v.MaxThreads = strconv.Itoa(*n.MaxThreads)
			v.Limit = v.MaxThreads
		}
		if n.MaxThreadsProblem != "" {
			v.MaxThreads = "invalid (0)"
		}
		for qid, byNode := range running {
			if c := byNode[n.Name]; c > 0 {
				v.PerQueue = append(v.PerQueue, perQueue{Name: names[qid], Running: c})
				v.Running += c
			}
		}
		sort.Slice(v.PerQueue, func(i, j int) bool { return v.PerQueue[i].Name < v.PerQueue[j].Name })
		d.Nodes = append(d.Nodes, v)
	}
	for _, t := range failures {
		d.Failures = append(d.Failures, failureView{Task: t, QueueName: names[t.Queue], Reason: human.LastLine(t, 100, "(in GridFS)")})
	}
	h.render(w, r, "overview", page{Title: "Status", Nav: "overview", Refresh: int(h.refresh.Seconds()), Data: d})
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
