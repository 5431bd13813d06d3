package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Task list limits: the default, and the most one page shows.
const (
	defaultLimit = 50
	maxLimit     = 500
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
	// QueueDeleted: no queue document has the task's queue id (a deleted
	// queue's task).
	QueueDeleted bool
	Params       string
	Outcome      string // who decided how its last run ended (queue.Outcome)
	Priority     string // its priority (queue.PriorityText; "": none, 0)
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
	Param         string
	// DeletedQueue is the queue filter's id when no queue document has it:
	// a deleted queue's (den queue delete --force leaves its tasks), whose
	// tasks cannot run again (no retry; archive or purge the ended ones).
	DeletedQueue string
	// Archived lists tasks_archive (?archived=1) instead of tasks.
	Archived bool
	// Newer and Older link the pages next to this one (empty: none).
	Newer, Older string
	Error        string
}

func (h *handler) tasks(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	d := tasksData{Queue: strings.TrimSpace(q.Get("queue")), Status: strings.TrimSpace(q.Get("status")),
		Node: strings.TrimSpace(q.Get("node")), Outcome: strings.TrimSpace(q.Get("outcome")), Outcomes: queue.Outcomes, Param: q.Get("param"),
		Limit: defaultLimit, Choices: statusChoices, Custom: true, Archived: q.Get("archived") == "1"}
	for _, c := range statusChoices {
		if c.Value == d.Status {
			d.Custom = false
		}
	}
	queues, bad, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d.Queues = queues
	names := map[bson.ObjectID]string{}
	for _, qu := range queues {
		names[qu.ID] = queue.ShownName(qu.Name)
	}
	known := queue.QueueIDs(queues, bad)
	d.DeletedQueue = deletedQueue(d.Queue, known)
	f, err := parseFilter(d, queues)
	if err == nil {
		f.Limit, err = limitOf(strings.TrimSpace(q.Get("limit")))
	}
	if err == nil {
		err = pageOf(&f, q)
	}
	if err != nil {
		d.Error = err.Error()
		h.renderStatus(w, r, http.StatusBadRequest, "tasks", page{Title: "Tasks", Nav: "tasks", Data: d})
		return
	}
	d.Limit = f.Limit
	f.Limit++ // one more: is there a page beyond?
	list, err := h.listTasks(ctx, f, d.Archived)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	more := int64(len(list)) > d.Limit
	if more && !f.After.IsZero() {
		list = list[1:] // the newest is the next page's
	} else if more {
		list = list[:d.Limit]
	}
	if len(list) > 0 {
		if more || !f.After.IsZero() {
			d.Older = pageURL(q, "before", list[len(list)-1].ID)
		}
		if !f.Before.IsZero() || (more && !f.After.IsZero()) {
			d.Newer = pageURL(q, "after", list[0].ID)
		}
	}
	for _, t := range list {
		d.Rows = append(d.Rows, taskRowView{Task: t, QueueName: names[t.Queue], QueueDeleted: !known[t.Queue] && !t.Queue.IsZero(),
			Params: compactJSON(t.Parameters), Outcome: outcomeOf(t).Kind,
			Priority: queue.PriorityText(t.Raw.Lookup(queue.FieldPriority))})
	}
	d.Full = more
	h.render(w, r, "tasks", page{Title: "Tasks", Nav: "tasks", Refresh: int(h.refresh.Seconds()), Data: d})
}

// listTasks lists the tasks f selects, from tasks_archive when archived.
func (h *handler) listTasks(ctx context.Context, f queue.TaskFilter, archived bool) ([]queue.Task, error) {
	if archived {
		return h.archive.ListTasks(ctx, f)
	}
	return h.store.ListTasks(ctx, f)
}

// deletedQueue is ref when it is a queue id that no queue document has
// (known: queue.QueueIDs), a deleted queue's; else "". A name is never a
// deleted queue's: a deleted queue is found by its id only.
func deletedQueue(ref string, known map[bson.ObjectID]bool) string {
	id, err := bson.ObjectIDFromHex(ref)
	if err != nil || known[id] {
		return ""
	}
	return id.Hex()
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

// pageOf reads which page of the list is asked for: ?before=ID (the
// tasks below ID, newest first) or ?after=ID (those just above it), and
// the parameter search, ?param=KEY=VALUE.
func pageOf(f *queue.TaskFilter, q url.Values) error {
	for _, c := range []struct {
		name string
		id   *bson.ObjectID
	}{{"before", &f.Before}, {"after", &f.After}} {
		if v := q.Get(c.name); v != "" {
			id, err := bson.ObjectIDFromHex(v)
			if err != nil {
				return fmt.Errorf("%s %q: want a task id (24 hex digits)", c.name, v)
			}
			*c.id = id
		}
	}
	if !f.Before.IsZero() && !f.After.IsZero() {
		return errors.New("give before or after, not both")
	}
	if p := q.Get("param"); p != "" {
		key, value, ok := strings.Cut(p, "=")
		if !ok || !queue.ValidParamKey(key) {
			return fmt.Errorf("param %q: want KEY=VALUE, KEY 1 to 64 of A-Z, a-z, 0-9 and _ (no dots, no $)", p)
		}
		if !utf8.ValidString(value) {
			return fmt.Errorf("param %q: the value is not UTF-8", p)
		}
		f.ParamKey, f.ParamValue = key, queue.ParseParamValue(value)
	}
	return nil
}

// pageURL is the task list with the filters of q, at the page before or
// after id.
func pageURL(q url.Values, dir string, id bson.ObjectID) string {
	v := url.Values{}
	for k, vs := range q {
		if k != "before" && k != "after" && k != "msg" {
			v[k] = vs
		}
	}
	v.Set(dir, id.Hex())
	return "/tasks?" + v.Encode()
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
