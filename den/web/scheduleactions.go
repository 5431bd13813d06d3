package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// Schedule actions: POST /schedules/NAME/pause, /resume, /run and
// /delete, as den schedule pause, resume and delete do (run: the page's
// Run now, queue.OperatorStore.RunScheduleNow). A schedule's name is its id (its _id).
// Each answers a script with {"ok", "result", "message", "schedule"}
// (run adds "task"); a name no schedule has is a 404.

// scheduleActions are the handler's schedule actions, apart so that the
// handler stays a readable size.
type scheduleActions struct{ *handler }

// confirmData is the page that asks before a destructive action: Text
// says what will happen, the form posts Fields (and confirm) to Action.
type confirmData struct {
	Text, Action, Button, Back string
	Fields                     url.Values
}

func (h scheduleActions) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	h.pauseOrResumeSchedule(w, r, true)
}

func (h scheduleActions) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	h.pauseOrResumeSchedule(w, r, false)
}

func (h scheduleActions) pauseOrResumeSchedule(w http.ResponseWriter, r *http.Request, pause bool) {
	name := r.PathValue("name")
	ok, err := h.store.PauseSchedule(r.Context(), name, pause, h.now())
	switch {
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	case !ok:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no schedule %q", name))
		return
	}
	msg := "schedule-paused"
	if !pause {
		msg = "schedule-resumed"
	}
	h.log.Info("web: "+msg, zap.String("schedule", name), zap.String("remote", r.RemoteAddr))
	h.answerWith(w, r, "/schedules", msg, map[string]any{"schedule": name})
}

// runSchedule serves POST /schedules/NAME/run: the schedule's task, now.
func (h scheduleActions) runSchedule(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	id, inserted, err := h.store.RunScheduleNow(r.Context(), name, h.now())
	switch {
	case errors.Is(err, queue.ErrNoSchedule):
		h.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil && id.IsZero():
		h.fail(w, r, http.StatusConflict, err) // it cannot fire: its problem
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	msg := "schedule-run"
	if !inserted {
		msg = "schedule-run-already"
	} else {
		h.log.Info("web: schedule run now", zap.String("schedule", name), zap.String("task", id.Hex()), zap.String("remote", r.RemoteAddr))
	}
	h.answerWith(w, r, "/tasks/"+id.Hex(), msg, map[string]any{"schedule": name, "task": id.Hex()})
}

// deleteSchedule serves POST /schedules/NAME/delete. It deletes only with
// confirm=NAME: without it a browser gets a page that asks (its button
// carries it), a script a 400 saying what to send.
func (h scheduleActions) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if r.PostForm.Get("confirm") != name {
		sc, err := h.store.Schedule(r.Context(), name)
		switch {
		case err != nil:
			h.fail(w, r, http.StatusInternalServerError, err)
		case sc == nil:
			h.fail(w, r, http.StatusNotFound, fmt.Errorf("no schedule %q", name))
		case wantsJSON(r):
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("send confirm=%s to delete schedule %q", url.QueryEscape(name), name))
		default:
			h.render(w, r, "confirm", page{Title: "Delete schedule " + name, Nav: "schedules", Data: confirmData{
				Text:   fmt.Sprintf("This will delete schedule %q: it inserts no more tasks. The tasks it inserted stay.", name),
				Action: "/schedules/" + url.PathEscape(name) + "/delete", Button: "Delete schedule", Back: "/schedules",
				Fields: url.Values{"confirm": {name}}}})
		}
		return
	}
	ok, err := h.store.DeleteSchedule(r.Context(), name)
	switch {
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	case !ok:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no schedule %q", name))
		return
	}
	h.log.Info("web: schedule deleted", zap.String("schedule", name), zap.String("remote", r.RemoteAddr))
	h.answerWith(w, r, "/schedules", "schedule-deleted", map[string]any{"schedule": name})
}
