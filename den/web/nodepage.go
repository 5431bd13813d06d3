package web

import (
	"fmt"
	"net/http"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

type nodePageData struct {
	Node      nodeView
	DeadAfter string
	Tasks     []taskRow
	// Quiet says since when and by whom the node is quiet; empty: it
	// is not.
	Quiet string
	// More is set when the node holds more tasks than are listed
	// (queue.NodeTasksLimit).
	More bool
	// Charts are the tasks it finished, held, and its load over the
	// range asked for (?range=).
	Charts nodePageCharts
}

// nodePage serves GET /nodes/NAME: the node's state as the overview
// decides it, its last heartbeat, maxthreads, and the tasks it holds
// (claimed or running with node = NAME).
func (h *handler) nodePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	nodes, err := h.store.Nodes(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var n *queue.NodeDoc
	for i := range nodes {
		if nodes[i].Name == name {
			n = &nodes[i]
			break
		}
	}
	if n == nil {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no node named %q has written a heartbeat", name))
		return
	}
	held, err := h.store.NodeTasks(ctx, name)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	queues, _, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	rng := rangeOf(r.URL.Query().Get("range"))
	points, err := h.store.Stats(ctx, queue.StatsQuery{Step: rng.Step, Since: rng.buckets(h.now())[0], Kind: queue.StatNode, Node: name})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	names := map[bson.ObjectID]string{}
	for _, q := range queues {
		names[q.ID] = queue.ShownName(q.Name)
	}
	v := nodeViewOf(*n, h.now(), h.dead, nil, names)
	d := nodePageData{Node: v, DeadAfter: h.dead.String(), More: len(held) >= queue.NodeTasksLimit}
	if q := queue.QuietOf(n.Raw); q != nil {
		d.Quiet = quietText(*q)
	}
	for _, t := range held {
		d.Tasks = append(d.Tasks, taskRow{Task: t, QueueName: names[t.Queue]})
	}
	d.Node.Running = len(held)
	d.Charts = nodePageChartsOf(rng, h.now(), n.Name, points)
	h.render(w, r, "node", page{Title: "Node " + n.Name, Nav: "overview", Refresh: int(h.refresh.Seconds()), Data: d})
}
