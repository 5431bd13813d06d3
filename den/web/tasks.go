package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Task list limits: the default, and the most one page shows.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// statusChoices are the status filter's menu: the value is what the
// status parameter takes (names or numbers, comma-separated).
var statusChoices = []struct{ Value, Label string }{
	{"", "any status"},
	{"queued", "queued"},
	{"claimed,running", "running"},
	{"succeeded", "succeeded"},
	{"failed,orphaned", "failed or orphaned"},
	{"cancelled", "cancelled"},
}

type taskRowView struct {
	Task      queue.Task
	QueueName string
	Params    string
	Outcome   string // who decided how its last run ended (queue.Outcome)
}

type tasksData struct {
	Queues        []queue.Queue
	Queue, Status string
	Node          string
	Outcome       string
	Outcomes      []string
	Limit         int64
	Choices       []struct{ Value, Label string }
	Custom        bool // the status filter is not one of Choices
	Rows          []taskRowView
	Full          bool // the list reached the limit
	Error         string
}

func (h *handler) tasks(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	d := tasksData{Queue: strings.TrimSpace(q.Get("queue")), Status: strings.TrimSpace(q.Get("status")),
		Node: strings.TrimSpace(q.Get("node")), Outcome: strings.TrimSpace(q.Get("outcome")), Outcomes: queue.Outcomes,
		Limit: defaultLimit, Choices: statusChoices, Custom: true}
	for _, c := range statusChoices {
		if c.Value == d.Status {
			d.Custom = false
		}
	}
	queues, _, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d.Queues = queues
	names := map[bson.ObjectID]string{}
	for _, qu := range queues {
		names[qu.ID] = qu.Name
	}
	f, err := parseFilter(d, queues)
	if err == nil {
		f.Limit, err = limitOf(strings.TrimSpace(q.Get("limit")))
	}
	if err != nil {
		d.Error = err.Error()
		h.renderStatus(w, r, http.StatusBadRequest, "tasks", page{Title: "Tasks", Nav: "tasks", Data: d})
		return
	}
	d.Limit = f.Limit
	list, err := h.store.ListTasks(ctx, f)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	for _, t := range list {
		d.Rows = append(d.Rows, taskRowView{Task: t, QueueName: names[t.Queue], Params: compactJSON(t.Parameters), Outcome: outcomeOf(t).Kind})
	}
	d.Full = int64(len(list)) == f.Limit
	h.render(w, r, "tasks", page{Title: "Tasks", Nav: "tasks", Refresh: int(h.refresh.Seconds()), Data: d})
}

// parseFilter reads the list's filters: a queue (id or name), statuses
// (names or numbers, comma-separated), a node, a limit.
func parseFilter(d tasksData, queues []queue.Queue) (queue.TaskFilter, error) {
	f := queue.TaskFilter{Node: d.Node}
	if d.Queue != "" {
		found := false
		for _, qu := range queues {
			if qu.ID.Hex() == d.Queue || qu.Name == d.Queue {
				f.Queues = append(f.Queues, qu.ID)
				found = true
			}
		}
		if !found {
			id, err := bson.ObjectIDFromHex(d.Queue)
			if err != nil {
				return f, fmt.Errorf("no queue %q", d.Queue)
			}
			f.Queues = []bson.ObjectID{id} // a queue document that cannot be parsed still has tasks
		}
	}
	if d.Outcome != "" {
		for _, o := range strings.Split(d.Outcome, ",") {
			if !slices.Contains(queue.Outcomes, o) {
				return f, fmt.Errorf("outcome %q: want one of %s", o, strings.Join(queue.Outcomes, ", "))
			}
			f.Outcomes = append(f.Outcomes, o)
		}
	}
	if d.Status != "" {
		for _, s := range strings.Split(d.Status, ",") {
			st, err := queue.ParseStatus(s)
			if err != nil {
				return f, err
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	return f, nil
}

// limitOf reads the limit parameter.
func limitOf(s string) (int64, error) {
	if s == "" {
		return defaultLimit, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > maxLimit {
		return 0, errors.New("limit " + strconv.Quote(s) + ": want 1 to " + strconv.Itoa(maxLimit))
	}
	return n, nil
}

// outcomeOf is who decided how a task's last run ended, and why, as den
// task list shows it (empty on tasks a Perl node or an older den ran).
func outcomeOf(t queue.Task) queue.Outcome {
	kind, _ := t.Raw.Lookup(queue.FieldOutcome).StringValueOK()
	reason, _ := t.Raw.Lookup(queue.FieldOutcomeReason).StringValueOK()
	return queue.Outcome{Kind: kind, Reason: reason}
}
