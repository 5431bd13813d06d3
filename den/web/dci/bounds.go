package dci

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/web"
)

// Every read has a bound, as on den web's page (den/web/readbounds.go):
// reads need no token, so whoever reaches the address may send them.
//
//   - Its body arrives within web.BodyTimeout (a write with the token:
//     WriteBodyTimeout), is at most MaxReadBody, and its JSON nests at
//     most MaxDepth deep with at most MaxMembers in an object or array
//     (params.go); a filter, sort or projection naming an operator that
//     runs code is refused (search.go).
//   - It waits for a place: a search (POST /tasks/search,
//     /search-tasks-json) among at most SearchesPerClient per client
//     address and Searches in all, any other read among at most
//     web.ReadsPerClient and web.Reads; each waits at most web.GateWait
//     (then 429, or 503 when everyone's places are taken). Its place is
//     taken before its body is read, and kept until its answer is
//     written.
//   - It runs under a deadline, ReadTimeout, which the driver sends with
//     every command as maxTimeMS.
//   - A search returns at most SearchLimit tasks (OldSearchLimit for
//     /search-tasks-json), and at most MaxAnswerOutput of output read
//     from GridFS.
//
// When its database read fails, the client that went away is logged at
// debug and answered nothing; a read out of time gets 503 with
// Retry-After; a database that cannot be reached 503 with Retry-After.
const (
	ReadTimeout = web.ReadTimeout
	// SearchesPerClient and Searches bound the searches at once.
	SearchesPerClient = 1
	Searches          = 4
	// WriteBodyTimeout is how long a write's body may take to arrive,
	// once its token is accepted: 64 MiB of tasks on a slow link.
	WriteBodyTimeout = 5 * time.Minute
	// MaxAnswerOutput bounds the output one search reads from GridFS
	// (terse off): past it, a task's stream is a note.
	MaxAnswerOutput = 16 << 20
)

// enter takes a read's place in its gate; when it cannot, it has
// answered (429 or 503 with Retry-After; nothing to a client that went
// away).
func (h *handler) enter(w http.ResponseWriter, r *http.Request, rt route) (release func(), ok bool) {
	gate := h.reads
	if rt.search {
		gate = h.searches
	}
	release, err := gate.Enter(r)
	if err == nil {
		return release, true
	}
	var busy *web.BusyError
	if !errors.As(err, &busy) {
		h.log.Debug("dci: a read's client went away while it waited for its turn", zap.String("path", r.URL.Path), errField(err))
		return nil, false
	}
	h.log.Debug("dci: "+busy.What+" refused: too many at once", zap.String("remote", r.RemoteAddr), zap.Bool("per_client", busy.PerClient))
	w.Header().Set("Retry-After", busy.RetryAfter())
	sendJSON(w, busy.Status(), obj{{"error", busy.Error()}})
	return nil, false
}

// dbFailed answers a database error that is not the request's fault, and
// reports whether it did: nothing to a client that went away (logged at
// debug), 503 with Retry-After when the database did not answer in time
// or cannot be reached. The failing reads are logged when they start
// (ServeHTTP logs when they work again).
func (h *handler) dbFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	kind := web.DBFailureOf(r.Context(), err)
	switch kind {
	case web.DBAbandoned:
		h.log.Debug("dci: a request's client went away before its answer", zap.String("path", r.URL.Path), errField(err))
		return true
	case web.DBSlow, web.DBDown:
		if h.failing.CompareAndSwap(false, true) {
			h.log.Warn("dci: database reads failing; answering 503 until they work again", zap.Stringer("why", kind), errField(err))
		}
		msg, retry := web.SlowAnswer(h.readTimeout)
		if kind == web.DBDown {
			msg = "the database cannot be reached; retry shortly"
		}
		w.Header().Set("Retry-After", retry)
		sendJSON(w, http.StatusServiceUnavailable, obj{{"error", msg}})
		return true
	}
	return false
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
