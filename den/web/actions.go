package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// Actions run only through h.action, which checks the token first. Each
// logs one line and answers (answer): a browser's form is redirected (303)
// to the page it came from with a note; a script's request (a Bearer
// token, or Accept: application/json) gets JSON, its errors too.

// wantsJSON reports whether a request is a script's: it sent a Bearer
// token or asked for JSON.
func wantsJSON(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") ||
		strings.Contains(r.Header.Get("Accept"), "application/json")
}

// answer ends an action that did what it could: result is the key of its
// note (messages). A script gets 200 and {"ok": true, "result", "message"};
// a browser goes back to page, with the note.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, page, result string) {
	h.answerWith(w, r, page, result, nil)
}

// answerWith is answer with more fields in a script's JSON (what the
// action acted on: "queue", "schedule", "node").
func (h *handler) answerWith(w http.ResponseWriter, r *http.Request, page, result string, more map[string]any) {
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		a := map[string]any{"ok": true, "result": result, "message": messages[result]}
		for k, v := range more {
			a[k] = v
		}
		json.NewEncoder(w).Encode(a)
		return
	}
	http.Redirect(w, r, withMsg(page, result), http.StatusSeeOther)
}

func (h *handler) taskID(w http.ResponseWriter, r *http.Request) (bson.ObjectID, bool) {
	id, err := bson.ObjectIDFromHex(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not a task id", r.PathValue("id")))
		return id, false
	}
	return id, true
}

// cancel serves POST /tasks/ID/cancel, as den task cancel.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := h.taskID(w, r)
	if !ok {
		return
	}
	o, err := h.store.SetCancel(r.Context(), id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	page := "/tasks/" + id.Hex()
	switch o {
	case queue.CancelNoTask:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no task %s", id.Hex()))
	case queue.CancelFinished:
		h.answer(w, r, page, "already-ended")
	default:
		h.log.Info("web: task cancel requested", zap.String("task", id.Hex()), zap.String("remote", r.RemoteAddr))
		h.answer(w, r, page, "cancel-requested")
	}
}

// retry serves POST /tasks/ID/retry, as den task retry ID: an ended task
// goes back to its queue.
func (h *handler) retry(w http.ResponseWriter, r *http.Request) {
	id, ok := h.taskID(w, r)
	if !ok {
		return
	}
	t, err := h.store.Task(r.Context(), id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if t == nil {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no task %s", id.Hex()))
		return
	}
	done, err := h.store.RetryEnded(r.Context(), *t, h.now())
	if held := (*queue.KeyHeldError)(nil); errors.As(err, &held) {
		h.fail(w, r, http.StatusConflict, err) // another unfinished task holds its unique key
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	page := "/tasks/" + id.Hex()
	if !done {
		h.answer(w, r, page, "not-retried")
		return
	}
	h.log.Info("web: task retried", zap.String("task", id.Hex()), zap.Int("was_status", t.Status), zap.String("remote", r.RemoteAddr))
	h.answer(w, r, page, "retried")
}

// setMaxThreads serves POST /nodes/maxthreads (fields node, maxthreads),
// as den node set NODE maxthreads N|none: empty or none removes the limit.
func (h nodeActions) setMaxThreads(w http.ResponseWriter, r *http.Request) {
	node := strings.TrimSpace(r.PostForm.Get("node"))
	value := strings.TrimSpace(r.PostForm.Get("maxthreads"))
	if node == "" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no node given"))
		return
	}
	var limit *int
	if value != "" && !strings.EqualFold(value, "none") {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 || n > 1<<20 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("maxthreads %q: want a whole number from 0 to %d, or empty for no limit", value, 1<<20))
			return
		}
		limit = &n
	}
	if err := h.store.SetNodeMaxThreads(r.Context(), node, limit); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	shown := "none"
	if limit != nil {
		shown = strconv.Itoa(*limit)
	}
	h.log.Info("web: node maxthreads set", zap.String("node", node), zap.String("maxthreads", shown), zap.String("remote", r.RemoteAddr))
	h.answer(w, r, "/#nodes", "maxthreads-set")
}

// queueActions are the queue's actions: pause and resume.
type queueActions struct{ *handler }

// pauseQueue serves POST /queues/ID/pause, as den queue pause, and
// resumeQueue POST /queues/ID/resume, as den queue resume.
func (h queueActions) pauseQueue(w http.ResponseWriter, r *http.Request) {
	h.pauseOrResume(w, r, true)
}

func (h queueActions) resumeQueue(w http.ResponseWriter, r *http.Request) {
	h.pauseOrResume(w, r, false)
}

func (h queueActions) pauseOrResume(w http.ResponseWriter, r *http.Request, pause bool) {
	q, ok := h.actionQueue(w, r)
	if !ok {
		return
	}
	id := q.ID
	var o queue.PauseOutcome
	var err error
	msg := "queue-paused"
	if pause {
		o, err = h.store.PauseQueue(r.Context(), id, "den web ("+r.RemoteAddr+")", h.now())
	} else {
		msg = "queue-resumed"
		o, err = h.store.ResumeQueue(r.Context(), id)
	}
	switch {
	case errors.Is(err, queue.ErrNoQueue):
		h.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	case o == queue.PauseDone:
		h.log.Info("web: queue "+strings.TrimPrefix(msg, "queue-"), zap.String("queue", id.Hex()), zap.String("name", queue.ShownName(q.Name)), zap.String("remote", r.RemoteAddr))
	case pause:
		msg = "queue-already-paused"
	default:
		msg = "queue-not-paused"
	}
	back := "/#queues"
	if r.PostFormValue("back") == "queue" { // the queue's own page
		back = queueURL(id.Hex())
	}
	h.answerWith(w, r, back, msg, map[string]any{"queue": map[string]string{"id": id.Hex(), "name": queue.ShownName(q.Name)}})
}

// actionQueue finds the queue an action's path names ({ref}): by id, or by
// name. An id wins: a ref that is a queue's _id names that queue even if
// another queue is named with the same 24 hex digits (reach that one by
// its own id). A name several queues share is refused (409) with their
// ids; a ref that names no queue is a 404.
func (h queueActions) actionQueue(w http.ResponseWriter, r *http.Request) (queue.Queue, bool) {
	ref := r.PathValue("ref")
	if id, err := bson.ObjectIDFromHex(ref); err == nil {
		q, err := h.store.QueueDoc(r.Context(), id)
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return queue.Queue{}, false
		}
		if q != nil {
			return *q, true
		}
	}
	q, _, err := h.store.FindQueue(r.Context(), ref)
	switch {
	case errors.Is(err, queue.ErrNoQueue):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no queue is named %q or has that id", ref))
		return q, false
	case errors.As(err, new(*queue.AmbiguousQueueError)):
		h.fail(w, r, http.StatusConflict, err)
		return q, false
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return q, false
	}
	return q, true
}
