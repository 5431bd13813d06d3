package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// outputShown is how much of each stream a task's page shows at first;
// the rest is a link away (output.txt), or polled while the task runs.
const outputShown = 256 << 10

type streamView struct {
	Name      string
	Text      string
	Next      int64 // where polling resumes
	Total     int64
	Skipped   int64  // earlier bytes not kept (live output keeps the last 256 KiB)
	Truncated bool   // more is stored than shown
	Where     string // where it is stored
	URL       string // the whole stream as text
}

type historyView struct {
	queue.HistoryEntry
	StatusName string
	// Run is the run's number (its place in the history, from 1); Stdout
	// and Stderr its text, cut, when the entry keeps it; StdoutURL and
	// StderrURL where the whole of each stream is.
	Run                  int
	Stdout, Stderr       string
	StdoutURL, StderrURL string
	// Took is how long the run took, from its start to its end, as text;
	// empty when its start is not known.
	Took string
}

type taskData struct {
	Task       queue.Task
	QueueName  string
	Params     string
	Document   string
	Streams    []streamView
	History    []historyView
	HistoryErr string
	Outcome    queue.Outcome
	Why        queue.Reason // why a waiting task has not started (den task why); zero for any other
	Ended      bool
	Archived   bool // read from tasks_archive (den task archive): shown, not acted on
	Live       bool // the page polls for output and the end
	CanCancel  bool
	CanRetry   bool
	// RunTime charts this task's run times against its queue's recent
	// runs; nil when it has not run.
	RunTime *chartView
	// Took is how long its last run took, or the one running has taken
	// so far (then Running is set), as text; empty when it has not run.
	Took    string
	Running bool
}

// runTimesShown is how many of a task's runs its run-time chart draws.
const runTimesShown = 3

// runTimes are how long t's runs took, the last (or the one running, until
// now) first: from the start its runner recorded to the end.
func runTimes(t queue.Task, hist []queue.HistoryEntry, now time.Time) []time.Duration {
	var out []time.Duration
	if d, ok := lastRunTime(t, now); ok && d > 0 {
		out = append(out, d)
	}
	for i := len(hist) - 1; i >= 0 && len(out) < runTimesShown; i-- {
		if e := hist[i]; !e.Started.IsZero() && e.Ended.After(e.Started) {
			out = append(out, e.Ended.Sub(e.Started))
		}
	}
	return out
}

// lastRunTime is how long t's last run took (from the start its runner
// recorded to its end), or the one running has taken until now; ok is
// false when t has not run (or its runner's start is not known).
func lastRunTime(t queue.Task, now time.Time) (time.Duration, bool) {
	if t.Runner == nil || t.Runner.At.IsZero() || !t.StatusOK || t.Status < queue.StatusRunning {
		return 0, false
	}
	end := now
	if t.Status != queue.StatusRunning {
		end = t.Mtime
	}
	if end.Before(t.Runner.At) {
		return 0, false
	}
	return end.Sub(t.Runner.At), true
}

func (h *handler) task(w http.ResponseWriter, r *http.Request) {
	t, archived, err := h.findTask(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, findStatus(err), err)
		return
	}
	q, err := h.store.QueueDoc(r.Context(), t.Queue)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	why, err := h.why(r, *t)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if err := h.wantLive(r.Context(), t); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	runs, err := h.store.Stats(r.Context(), queue.StatsQuery{Step: runTimeRange.Step, Since: runTimeRange.buckets(h.now())[0], Kind: queue.StatQueue, Queue: t.Queue})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	d := taskData{Task: *t, Params: prettyJSON(t.Parameters), Document: prettyJSON(withoutBulk(t.Raw))}
	if q != nil {
		d.QueueName = queue.ShownName(q.Name)
	}
	d.Outcome = outcomeOf(*t)
	d.Why = why
	d.Ended = t.StatusOK && queue.Ended(t.Status)
	d.Live = !d.Ended && !archived
	d.CanCancel = t.StatusOK && t.Status <= 0 && t.Status != queue.StatusCancelled && t.Status != queue.StatusOrphaned && !t.Cancel && !archived
	d.CanRetry = t.StatusOK && t.Status != queue.StatusQueued && t.Status != queue.StatusClaimed && t.Status != queue.StatusRunning && !archived
	d.Archived = archived
	for _, stream := range []string{queue.StreamStdout, queue.StreamStderr} {
		data, o, err := h.readOutput(r.Context(), t, stream, 0, outputShown)
		s := streamView{Name: stream, URL: fmt.Sprintf("/tasks/%s/output.txt?stream=%s", t.ID.Hex(), stream)}
		if err != nil {
			s.Text = "(cannot read: " + err.Error() + ")"
		} else {
			s.Text, s.Next, s.Total, s.Skipped = string(data), o.Skipped+int64(len(data)), o.Total, o.Skipped
			s.Truncated = s.Next < o.Total
		}
		_, live := t.LiveOutput()
		switch _, file, err := t.Output(stream); {
		case live:
			s.Where = "live, as the task writes it"
		case errors.Is(err, queue.ErrNoOutput):
			s.Where = "none yet"
		case err != nil:
			s.Where = err.Error()
		case file.IsZero():
			s.Where = "in the task document"
		default:
			s.Where = "in GridFS file " + file.Hex()
		}
		d.Streams = append(d.Streams, s)
	}
	hist, err := t.History()
	if err != nil {
		d.HistoryErr = err.Error()
	}
	for i, e := range hist {
		v := historyView{HistoryEntry: e, StatusName: queue.StatusName(e.Status), Run: i + 1,
			Stdout: historyOutput(e.Stdout), Stderr: historyOutput(e.Stderr)}
		if !e.Started.IsZero() && !e.Ended.Before(e.Started) {
			v.Took = tookText(e.Ended.Sub(e.Started))
		}
		if e.Stdout != nil {
			v.StdoutURL = fmt.Sprintf("/tasks/%s/output.txt?stream=stdout&attempt=%d", t.ID.Hex(), i+1)
		}
		if e.Stderr != nil {
			v.StderrURL = fmt.Sprintf("/tasks/%s/output.txt?stream=stderr&attempt=%d", t.ID.Hex(), i+1)
		}
		d.History = append(d.History, v)
	}
	if took := runTimes(*t, hist, h.now()); len(took) > 0 {
		c := runTimeChart(h.now(), runs, took)
		d.RunTime = &c
	}
	if last, ok := lastRunTime(*t, h.now()); ok {
		d.Took, d.Running = tookText(last), t.Status == queue.StatusRunning
	}
	title := "Task " + t.ID.Hex()
	h.render(w, r, "task", page{Title: title, Nav: "tasks", Data: d})
}

// errNoTask is findTask's answer for an id that is in neither tasks nor
// tasks_archive, or is no id; findStatus maps it to 404.
var errNoTask = errors.New("no task")

// findTask reads the task ref names (24 hex digits) from tasks, else from
// tasks_archive (archived is then true), as den task show does.
func (h *handler) findTask(ctx context.Context, ref string) (t *queue.Task, archived bool, err error) {
	id, err := bson.ObjectIDFromHex(ref)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %q is not a task id (24 hex digits)", errNoTask, ref)
	}
	if t, err = h.store.Task(ctx, id); t != nil || err != nil {
		return t, false, err
	}
	if t, err = h.archive.Task(ctx, id); err != nil {
		return nil, false, err
	}
	if t == nil {
		return nil, false, fmt.Errorf("%w %s in database %s, nor in its archive", errNoTask, id.Hex(), h.db.Name())
	}
	return t, true, nil
}

// findStatus is the status that answers findTask's error.
func findStatus(err error) int {
	if errors.Is(err, errNoTask) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// historyOutput shows a past run's output kept in its history entry: its
// text, cut; "" when it is in a GridFS file (the row links to it) or none.
func historyOutput(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 4096 {
			return x[:4096] + "\n… (cut at 4 KiB)"
		}
		return x
	case nil, bson.ObjectID:
		return ""
	}
	return fmt.Sprintf("(%T)", v)
}

// withoutBulk is a task document without what the page shows apart
// (parameters, output, history).
func withoutBulk(raw bson.Raw) bson.Raw {
	elems, err := raw.Elements()
	if err != nil {
		return raw
	}
	d := bson.D{}
	for _, e := range elems {
		switch e.Key() {
		case "parameters", "params", queue.StreamStdout, queue.StreamStderr, queue.FieldHistory:
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	b, err := bson.Marshal(d)
	if err != nil {
		return raw
	}
	return b
}

// why is the first reason a task that waits (queued or held back) has not
// started, as den task why says it; zero for any other task.
func (h *handler) why(r *http.Request, t queue.Task) (queue.Reason, error) {
	if !t.StatusOK || t.Status >= queue.StatusClaimed || queue.Ended(t.Status) {
		return queue.Reason{}, nil
	}
	facts, err := h.store.ReadFacts(r.Context(), h.now(), h.dead)
	if err != nil {
		return queue.Reason{}, err
	}
	reasons, err := h.store.Why(r.Context(), facts, t)
	if err != nil {
		return queue.Reason{}, err
	}
	return reasons[0], nil
}
