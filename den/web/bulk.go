package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/bulk"
	"github.com/den-project/den/queue"
)

// BulkMax is the most tasks one bulk request acts on; a larger selection
// takes several requests (each confirms the count left).
const BulkMax = 10000

// Statuses a bulk action may change: cancel only what has not ended,
// retry only what has.
var (
	cancellable = []int{queue.StatusQueued, queue.StatusClaimed, queue.StatusRunning}
	retriable   = []int{queue.StatusOrphaned, queue.StatusCancelled, queue.StatusBlocked, queue.StatusTerminated, queue.StatusSucceeded, queue.StatusFailed}
)

type bulkData struct {
	Action, Verb string
	Filter       string     // the filter, in words
	Fields       url.Values // the filter, as the form carries it on
	Matched      int64
	Upto         string
	Changed      bool // the count changed since the last step
	Acted        bool // the confirming step ran
	Done         int  // how many it changed
	Rest         bool // more matched than BulkMax
	Max          int
}

// bulk serves POST /tasks/bulk: the task list's filter (queue, status,
// outcome, node, param) and action=cancel|retry|purge|archive (purge and
// archive: the ended tasks the filter selects, as den task purge and
// archive remove them, bulkretire.go). Without confirm it
// counts the tasks the action may change and asks for confirmation,
// fixing upto, the newest of them, so that later tasks are left alone.
// With confirm=N it acts on at most BulkMax of them (_id <= upto), one
// by one with the single-task methods, if N is still their count.
func (h *handler) bulk(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	action := r.PostForm.Get("action")
	_, retire := retireModes[action]
	if action != "cancel" && action != "retry" && !retire {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("action %q: want cancel, retry, purge or archive", action))
		return
	}
	d := tasksData{Queue: strings.TrimSpace(r.PostForm.Get("queue")), Status: strings.TrimSpace(r.PostForm.Get("status")),
		Node: strings.TrimSpace(r.PostForm.Get("node")), Outcome: strings.TrimSpace(r.PostForm.Get("outcome")), Param: r.PostForm.Get("param")}
	queues, bad, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if id := deletedQueue(d.Queue, queue.QueueIDs(queues, bad)); id != "" && action == "retry" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("queue %s was deleted (no queue document has this id): its tasks cannot run again; archive or purge the ended ones", id))
		return
	}
	f, err := parseFilter(d, queues)
	if err == nil && d.Param != "" {
		err = pageOf(&f, url.Values{"param": {d.Param}})
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	allowed := cancellable
	if action == "retry" {
		allowed = retriable
	}
	if !retire { // purge and archive select ended tasks whatever the filter says
		f.Statuses = keep(f.Statuses, allowed)
	}
	b := bulkData{Action: action, Verb: action, Filter: describe(d), Fields: url.Values{}, Max: BulkMax}
	for _, k := range []string{"queue", "status", "outcome", "node", "param"} {
		if v := r.PostForm.Get(k); v != "" {
			b.Fields.Set(k, v)
		}
	}
	b.Verb = map[string]string{"cancel": "cancelled", "retry": "retried", "purge": "purged", "archive": "archived"}[action]
	rf := queue.RetireFilter{TaskFilter: f}
	match := func() (int, error) { return bulkMatch(ctx, h.store, r, &f, &b) }
	if retire {
		match = func() (int, error) { return retireMatch(ctx, h.store, r, &rf, &b) }
	}
	if status, err := match(); err != nil {
		h.fail(w, r, status, err)
		return
	}
	h.dbOK()
	confirm, asked := r.PostForm.Get("confirm"), r.PostForm.Has("confirm")
	if asked && confirm != strconv.FormatInt(b.Matched, 10) {
		b.Changed = true // the count moved: ask again with the new one
	}
	if !asked || b.Changed {
		if wantsJSON(r) {
			// Nothing done: 409 when the count moved, else 400. The
			// answer carries what to confirm with.
			status, msg := http.StatusBadRequest, fmt.Sprintf("%d tasks match: send confirm=%d and upto=%s to %s them", b.Matched, b.Matched, b.Upto, action)
			if b.Changed {
				status, msg = http.StatusConflict, fmt.Sprintf("%d tasks match now, not %s: nothing was done; confirm again with confirm=%d", b.Matched, confirm, b.Matched)
			}
			bulkJSON(w, status, map[string]any{"action": action, "matched": b.Matched, "done": 0, "upto": b.Upto, "error": msg})
			return
		}
		h.render(w, r, "bulk", page{Title: "Confirm " + action, Nav: "tasks", Data: b})
		return
	}
	b.Acted, b.Rest = true, b.Matched > BulkMax
	if b.Matched > 0 {
		act := func() error { return bulkAct(ctx, h.store, h.now, f, &b) }
		if retire {
			act = func() error { return retireAct(ctx, h.store, rf, &b) }
		}
		if err := act(); err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
	}
	h.log.Info("web: bulk "+action, zap.String("filter", b.Filter), zap.String("upto", b.Upto), zap.Int64("matched", b.Matched),
		zap.Int("done", b.Done), zap.String("remote", r.RemoteAddr))
	if wantsJSON(r) {
		bulkJSON(w, http.StatusOK, map[string]any{"action": action, "matched": b.Matched, "done": b.Done, "upto": b.Upto})
		return
	}
	h.render(w, r, "bulk", page{Title: "Bulk " + action, Nav: "tasks", Data: b})
}

// bulkMatch fixes upto (the form's, or the newest task the filter f
// matches) and counts the tasks up to it into b; f then selects them. It
// returns the status to answer with when it fails.
func bulkMatch(ctx context.Context, store queue.OperatorStore, r *http.Request, f *queue.TaskFilter, b *bulkData) (int, error) {
	if f.Statuses == nil {
		return 0, nil
	}
	var upto bson.ObjectID
	if v := r.PostForm.Get("upto"); v != "" {
		var err error
		if upto, err = bson.ObjectIDFromHex(v); err != nil {
			return http.StatusBadRequest, fmt.Errorf("upto %q: want a task id", v)
		}
	} else {
		newest, err := store.ListTasks(ctx, queue.TaskFilter{Queues: f.Queues, Statuses: f.Statuses, Node: f.Node,
			Outcomes: f.Outcomes, ParamKey: f.ParamKey, ParamValue: f.ParamValue, Limit: 1})
		if err != nil {
			return http.StatusInternalServerError, err
		}
		if len(newest) > 0 {
			upto = newest[0].ID
		}
	}
	if !upto.IsZero() {
		f.Before = next(upto)
		b.Upto = upto.Hex()
		var err error
		if b.Matched, err = store.CountTasks(ctx, *f); err != nil {
			return http.StatusInternalServerError, err
		}
	}
	return 0, nil
}

// bulkAct cancels or retries (b.Action) at most BulkMax of the tasks f
// selects, with den/bulk, and counts in b.Done those it changed.
func bulkAct(ctx context.Context, store queue.OperatorStore, now func() time.Time, f queue.TaskFilter, b *bulkData) error {
	f.Limit = BulkMax
	list, err := store.ListTasks(ctx, f)
	if err != nil {
		return err
	}
	if b.Action == "cancel" {
		ids := make([]bson.ObjectID, len(list))
		for i, t := range list {
			ids[i] = t.ID
		}
		var outcomes []queue.CancelOutcome
		outcomes, err = bulk.Cancel(ctx, store, ids)
		for _, o := range outcomes {
			if o == queue.CancelSet {
				b.Done++
			}
		}
	} else {
		var done bulk.Retried
		done, err = bulk.Retry(ctx, store, list, now)
		b.Done = len(done.Tasks)
	}
	if err != nil {
		return fmt.Errorf("after %d of %d: %w", b.Done, b.Matched, err)
	}
	return nil
}

// keep is the statuses of have that are in allowed: allowed when have is
// empty (any status), nil when none is.
func keep(have, allowed []int) []int {
	if len(have) == 0 {
		return allowed
	}
	var out []int
	for _, s := range have {
		if slices.Contains(allowed, s) {
			out = append(out, s)
		}
	}
	return out
}

// next is the ObjectId just above id, so that _id < next(id) is _id <= id.
func next(id bson.ObjectID) bson.ObjectID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}

// describe is a filter in words.
func describe(d tasksData) string {
	var parts []string
	for _, p := range []struct{ k, v string }{{"queue", d.Queue}, {"status", d.Status}, {"outcome", d.Outcome}, {"node", d.Node}, {"parameter", d.Param}} {
		if p.v != "" {
			parts = append(parts, p.k+" "+p.v)
		}
	}
	if len(parts) == 0 {
		return "all tasks"
	}
	return strings.Join(parts, ", ")
}

func bulkJSON(w http.ResponseWriter, status int, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
