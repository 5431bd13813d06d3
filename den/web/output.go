package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

// pollLimit is the most bytes one poll of the output endpoint returns; a
// client asks again at once while more is there.
const pollLimit = 64 << 10

// storedOutput is a task's stdout or stderr as stored now, read from a
// byte offset on.
type storedOutput struct {
	io.ReadCloser
	// Total is how many bytes the stream has so far.
	Total int64
	// Reset is set when the offset asked for was past the end: the output
	// was replaced (a retried run writes new output), and reading starts
	// at 0 again.
	Reset bool
	// From is where reading starts; Skipped counts the bytes from there on
	// that are not kept (a running task's live output keeps only the last
	// queue.LiveTail bytes), so the data read starts at From+Skipped.
	From, Skipped int64
}

// openOutput is the one place that knows where a task's output lives:
// while the task runs on a den node, in its live output (the last
// queue.LiveTail bytes of each stream, published while someone asks, see
// wantLive); else in the task document's field, or in the GridFS file it
// names (Disbatch's layout, written when the run ends). Offsets are the
// same in both, so a reader goes on from the stored output when the run
// ends. A task without output yet gives empty output.
func (h *handler) openOutput(ctx context.Context, t *queue.Task, stream string, from int64) (storedOutput, error) {
	empty := storedOutput{ReadCloser: io.NopCloser(strings.NewReader(""))}
	if live, ok := t.LiveOutput(); ok {
		s := live.Stream(stream)
		o := storedOutput{Total: s.End(), From: from}
		if from > o.Total {
			o.From, o.Reset = 0, true
		}
		data, skipped := s.After(o.From)
		o.Skipped = skipped
		o.ReadCloser = io.NopCloser(bytes.NewReader(data))
		return o, nil
	}
	text, file, err := t.Output(stream)
	switch {
	case errors.Is(err, queue.ErrNoOutput):
		return empty, nil
	case err != nil:
		return empty, fmt.Errorf("task %s: %w", t.ID.Hex(), err)
	case file.IsZero():
		o := storedOutput{Total: int64(len(text)), From: from}
		if from > o.Total {
			o.From, o.Reset = 0, true
		}
		o.ReadCloser = io.NopCloser(strings.NewReader(text[o.From:]))
		return o, nil
	}
	rd, err := gridfs.NewBucket(h.db, queue.GridFSPrefix).Open(ctx, file)
	if errors.Is(err, gridfs.ErrNotFound) {
		return empty, nil // not visible yet: a file appears when closed
	}
	if err != nil {
		return empty, fmt.Errorf("task %s: %s: %w", t.ID.Hex(), stream, err)
	}
	o := storedOutput{ReadCloser: rd, Total: rd.Length, From: from}
	if from > o.Total {
		o.From, o.Reset = 0, true
	}
	if _, err := io.CopyN(io.Discard, rd, o.From); err != nil {
		rd.Close()
		return empty, fmt.Errorf("task %s: %s: skip to %d: %w", t.ID.Hex(), stream, o.From, err)
	}
	return o, nil
}

// wantLive asks for a running task's live output (queue.OperatorStore.SetLiveUntil) when the
// last request runs out within two thirds of queue.LiveLease: a page and
// its polls renew it about every 10 seconds, not on every poll. A task
// that is not claimed or running is left alone.
func (h *handler) wantLive(ctx context.Context, t *queue.Task) error {
	if !t.StatusOK || (t.Status != queue.StatusClaimed && t.Status != queue.StatusRunning) {
		return nil
	}
	now := h.now()
	if t.LiveUntil.Sub(now) > 2*queue.LiveLease/3 {
		return nil
	}
	_, err := h.store.SetLiveUntil(ctx, t.ID, now.Add(queue.LiveLease))
	return err
}

// readOutput reads up to limit bytes of a stream from offset from, cut at
// a character boundary when more follows (a poll then resumes there).
// The data starts at o.From+o.Skipped.
func (h *handler) readOutput(ctx context.Context, t *queue.Task, stream string, from, limit int64) (data []byte, o storedOutput, err error) {
	o, err = h.openOutput(ctx, t, stream, from)
	if err != nil {
		return nil, o, err
	}
	defer o.Close()
	data, err = io.ReadAll(io.LimitReader(o, limit))
	if err != nil {
		return nil, o, fmt.Errorf("task %s: read %s: %w", t.ID.Hex(), stream, err)
	}
	if o.From+o.Skipped+int64(len(data)) < o.Total {
		data = cutRune(data)
	}
	return data, o, nil
}

// cutRune drops an incomplete UTF-8 character at the end of b.
func cutRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// outputReply is the output endpoint's JSON.
type outputReply struct {
	Data       string `json:"data"`
	Next       int64  `json:"next"`    // the offset to ask for next
	Total      int64  `json:"total"`   // bytes stored so far
	More       bool   `json:"more"`    // more is stored already: ask again at once
	Reset      bool   `json:"reset"`   // the output was replaced: Data starts at 0
	Skipped    int64  `json:"skipped"` // bytes before Data that were not kept (live output keeps the last 256 KiB)
	Ended      bool   `json:"ended"`   // the task has ended: nothing more will come
	Status     *int   `json:"status"`
	StatusName string `json:"status_name"`
	Group      string `json:"group"` // todo, running, done, failed, cancelled
}

// output serves GET /tasks/ID/output?stream=stdout&from=N: the bytes of
// the stream after offset N, as stored now, and whether the task ended.
func (h *handler) output(w http.ResponseWriter, r *http.Request) {
	t, stream, ok := h.streamRequest(w, r)
	if !ok {
		return
	}
	from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	if r.URL.Query().Get("from") == "" {
		from, err = 0, nil
	}
	if err != nil || from < 0 {
		jsonError(w, http.StatusBadRequest, "from must be a byte offset (0 or more)")
		return
	}
	if err := h.wantLive(r.Context(), t); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	data, o, err := h.readOutput(r.Context(), t, stream, from, pollLimit)
	if err != nil {
		h.fail(w, r, outputErrorStatus(err), err)
		return
	}
	rep := outputReply{Data: string(data), Next: o.From + o.Skipped + int64(len(data)), Total: o.Total, Reset: o.Reset, Skipped: o.Skipped,
		Ended: t.StatusOK && queue.Ended(t.Status), StatusName: queue.StatusName(t.Status), Group: queue.StatusGroup(t.Status)}
	rep.More = rep.Next < rep.Total
	if t.StatusOK {
		st := t.Status
		rep.Status = &st
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(rep)
}

// outputText serves GET /tasks/ID/output.txt?stream=stdout: the whole
// stream as stored, as plain text.
func (h *handler) outputText(w http.ResponseWriter, r *http.Request) {
	t, stream, ok := h.streamRequest(w, r)
	if !ok {
		return
	}
	name := fmt.Sprintf("%s.%s.txt", t.ID.Hex(), stream)
	if a := r.URL.Query().Get("attempt"); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			jsonError(w, http.StatusBadRequest, "attempt must be a run's number, from 1")
			return
		}
		hist, err := t.History()
		if err != nil {
			jsonError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		switch {
		case n > len(hist)+1:
			jsonError(w, http.StatusNotFound, fmt.Sprintf("task %s has had %d runs", t.ID.Hex(), len(hist)+1))
			return
		case n <= len(hist):
			h.earlierOutput(w, r, t, hist[n-1], stream, n)
			return
		}
	}
	o, err := h.openOutput(r.Context(), t, stream, 0)
	if err != nil {
		h.fail(w, r, outputErrorStatus(err), err)
		return
	}
	defer o.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.FormatInt(o.Total, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`inline; filename="%s"`, name))
	io.Copy(w, o)
}

// earlierOutput serves the output of an earlier run of a task, run n of
// its history: a GridFS file, or text kept in the entry.
func (h *handler) earlierOutput(w http.ResponseWriter, r *http.Request, t *queue.Task, e queue.HistoryEntry, stream string, n int) {
	v := e.Stdout
	if stream == queue.StreamStderr {
		v = e.Stderr
	}
	var body io.Reader
	var length int64
	switch v := v.(type) {
	case string:
		body, length = strings.NewReader(v), int64(len(v))
	case bson.ObjectID:
		rd, err := gridfs.NewBucket(h.db, queue.GridFSPrefix).Open(r.Context(), v)
		if errors.Is(err, gridfs.ErrNotFound) {
			jsonError(w, http.StatusNotFound, fmt.Sprintf("run %d's %s file %s is gone from GridFS", n, stream, v.Hex()))
			return
		}
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, fmt.Errorf("task %s, run %d: %s: %w", t.ID.Hex(), n, stream, err))
			return
		}
		defer rd.Close()
		body, length = rd, rd.Length
	default:
		jsonError(w, http.StatusNotFound, fmt.Sprintf("run %d kept no %s", n, stream))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.FormatInt(length, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`inline; filename="%s.run%d.%s.txt"`, t.ID.Hex(), n, stream))
	io.Copy(w, body)
}

// streamRequest reads the task and the stream a request names; on a
// problem it has answered already.
func (h *handler) streamRequest(w http.ResponseWriter, r *http.Request) (*queue.Task, string, bool) {
	stream := r.URL.Query().Get("stream")
	if stream == "" {
		stream = queue.StreamStdout
	}
	if stream != queue.StreamStdout && stream != queue.StreamStderr {
		jsonError(w, http.StatusBadRequest, "stream must be stdout or stderr")
		return nil, "", false
	}
	t, _, err := h.findTask(r.Context(), r.PathValue("id"))
	if st := findStatus(err); err != nil && st >= 500 {
		h.fail(w, r, st, err) // the database's failure: told apart there
		return nil, "", false
	} else if err != nil {
		jsonError(w, st, err.Error())
		return nil, "", false
	}
	return t, stream, true
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// outputErrorStatus is the HTTP status for a failure to read a task's
// output: 422 when the task document is at fault (its output field is of
// another type: the page says so, and the database is not taken for
// failing), else 500.
func outputErrorStatus(err error) int {
	if errors.Is(err, queue.ErrOutputType) {
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}
