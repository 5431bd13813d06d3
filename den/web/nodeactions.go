package web

import (
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// Node actions: POST /nodes/NAME/quiet, /resume and /forget, as den node
// quiet, resume and forget do. Each answers a script with {"ok",
// "result", "message", "node"}; a name no node document has is a 404.

// nodeActions are the handler's node actions, apart so that the handler
// stays a readable size.
type nodeActions struct{ *handler }

func (h nodeActions) quiet(w http.ResponseWriter, r *http.Request)  { h.quietOrResume(w, r, true) }
func (h nodeActions) resume(w http.ResponseWriter, r *http.Request) { h.quietOrResume(w, r, false) }

func (h nodeActions) quietOrResume(w http.ResponseWriter, r *http.Request, quiet bool) {
	name := r.PathValue("name")
	var o queue.PauseOutcome
	var err error
	msg := "node-quiet"
	if quiet {
		o, err = h.store.QuietNode(r.Context(), name, "den web ("+r.RemoteAddr+")", h.now())
	} else {
		msg = "node-resumed"
		o, err = h.store.ResumeNode(r.Context(), name)
	}
	switch {
	case errors.Is(err, queue.ErrNoNode):
		h.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	case o == queue.PauseDone:
		h.log.Info("web: "+msg, zap.String("node", name), zap.String("remote", r.RemoteAddr))
	case quiet:
		msg = "node-already-quiet"
	default:
		msg = "node-not-quiet"
	}
	h.answerWith(w, r, nodeURL(name), msg, map[string]any{"node": name})
}

// forget serves POST /nodes/NAME/forget: the node document of a stopped
// or dead node goes; a running node, or one that holds tasks, is refused
// with 409.
func (h nodeActions) forget(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	n, err := h.store.ForgetNode(r.Context(), name, h.now(), h.dead)
	switch {
	case errors.Is(err, queue.ErrNoNode):
		h.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil && n.Raw == nil:
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	case err != nil:
		h.fail(w, r, http.StatusConflict, err)
		return
	}
	h.log.Info("web: node forgotten", zap.String("node", name), zap.String("remote", r.RemoteAddr))
	h.answerWith(w, r, "/#nodes", "node-forgotten", map[string]any{"node": name, "state": n.State(h.now(), h.dead)})
}

// quietText says since when and by whom a node is quiet.
func quietText(q queue.Quiet) string {
	s := "quiet"
	if !q.At.IsZero() {
		s += " since " + q.At.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if q.By != "" {
		s += " by " + q.By
	}
	return fmt.Sprintf("%s; resumes with maxthreads %s", s, q.Limit())
}
