package dci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queueEntry is a queue as GET /queues lists it (Disbatch's
// scheduler_report): id, plugin, name, threads and its tasks counted as
// the Perl web API counts them: queued (status -2 and below, which takes
// in blocked, cancelled and orphaned tasks), running (-1 and 0) and
// completed (1 and up). plugin, name and threads are the document's own
// values; for a queue written with the protocol's spellings, plugin is
// its constructor and threads its maxthreads (a limit per node).
func queueEntry(raw bson.Raw, id bson.ObjectID, c queue.StatusCounts) obj {
	pick := func(keys ...string) any {
		for _, k := range keys {
			if v := raw.Lookup(k); v.Type != 0 {
				return fromBSON(v)
			}
		}
		return nil
	}
	var queued, running, completed int64
	for st, n := range c.ByStatus {
		switch {
		case st <= queue.StatusQueued:
			queued += n
		case st == queue.StatusClaimed || st == queue.StatusRunning:
			running += n
		default:
			completed += n
		}
	}
	var idv any
	if !id.IsZero() {
		idv = id.Hex()
	}
	return obj{{"id", idv}, {"plugin", pick("plugin", "constructor")}, {"name", pick("name")},
		{"threads", pick("threads", "maxthreads")}, {"queued", queued}, {"running", running}, {"completed", completed}}
}

// queueEntries is every queue as GET /queues lists it, oldest first (by
// _id: the order MongoDB returns a collection that is only inserted into,
// as Perl listed it); documents den cannot use as queues come last, with
// their id.
func (h *handler) queueEntries(ctx context.Context) ([]any, []queue.Queue, error) {
	queues, bad, err := h.store.Queues(ctx)
	if err != nil {
		return nil, nil, err
	}
	slices.SortStableFunc(queues, func(a, b queue.Queue) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	census, err := h.census.Take(ctx, h.countsAge)
	if err != nil {
		return nil, nil, err
	}
	counts := census.Queues
	out := []any{}
	for _, q := range queues {
		out = append(out, queueEntry(q.Raw, q.ID, counts[q.ID]))
	}
	for _, b := range bad {
		id, _ := b.ID.(bson.ObjectID)
		out = append(out, queueEntry(nil, id, counts[id]))
	}
	return out, queues, nil
}

// getQueues serves GET /queues.
func (h *handler) getQueues(w http.ResponseWriter, r *http.Request, _ params, _ ...string) {
	list, _, err := h.queueEntries(r.Context())
	if err != nil {
		h.dbError(w, r, "Could not get current queues", err)
		return
	}
	sendJSON(w, http.StatusOK, list)
}

// getQueue serves GET /queues/:queue: its entry of GET /queues, found by
// id when :queue looks like one, else by name (the first of that name).
// An unknown queue is a 404 with an error (the Perl web API failed to
// encode its undef: a 500).
func (h *handler) getQueue(w http.ResponseWriter, r *http.Request, _ params, args ...string) {
	list, _, err := h.queueEntries(r.Context())
	if err != nil {
		h.dbError(w, r, "Could not get current queues", err)
		return
	}
	key := "name"
	if _, ok := idOf(args[0]); ok {
		key = "id"
	}
	for _, e := range list {
		if v, _ := e.(obj).get(key); v == args[0] {
			sendJSON(w, http.StatusOK, e)
			return
		}
	}
	sendJSON(w, http.StatusNotFound, obj{{"error", "queue not found"}, {"queue", args[0]}})
}

// perlTrue is Perl's truth of a parameter: not null, "", "0" or false.
func perlTrue(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != "" && v != "0"
	}
	if f, ok := number(v); ok {
		return f != 0 // a JSON number
	}
	return true // an object or an array
}

// insertOneResult is a MongoDB::InsertOneResult as the Perl web API writes it.
func insertOneResult(id any) obj {
	return obj{{"inserted_id", id}, {"write_errors", []any{}}, {"write_concern_errors", []any{}}}
}

// duplicateName is the answer's part for a queue name that is taken, in
// the shape the Perl web API answers MongoDB's duplicate key error in
// (when Disbatch's unique index on queues' names exists: a Perl node
// makes it).
func (h *handler) duplicateName(name, plugin string) (obj, string) {
	msg := fmt.Sprintf("E11000 duplicate key error collection: %s.queues index: name_1 dup key: { name: %s }", h.db.Name(), strconv.Quote(name))
	res := insertOneResult(nil)
	res.set("write_errors", []any{obj{{"index", int64(0)}, {"code", int64(11000)}, {"errmsg", msg}, {"op", obj{{"name", name}, {"plugin", plugin}}}}})
	return obj{{"code", int64(11000)}, {"message", msg}, {"error_labels", []any{}}, {"previous_exception", ""},
		{"result", obj{{"MongoDB::InsertOneResult", res}}}}, "MongoDB::DuplicateKeyError: " + msg
}

// createQueue creates a queue {name, plugin} with both counts at 0 and
// no limit (threads, as later Disbatch names it: it runs nothing until
// one is set), as den queue create does. It returns the new id, or the
// answer's error part for a taken name (dup), or an error (a name den
// does not give a queue: queue.ErrQueueName).
func (h *handler) createQueue(ctx context.Context, name, plugin string) (bson.ObjectID, obj, string, error) {
	var s queue.QueueSettings
	s.Set = bson.D{{Key: queue.SettingName, Value: name}, {Key: queue.SettingPluginLater, Value: plugin}}
	id, err := h.store.CreateQueueWith(ctx, s)
	if errors.Is(err, queue.ErrQueueExists) {
		dup, msg := h.duplicateName(name, plugin)
		return id, dup, msg, nil
	}
	return id, nil, "", err
}

// postQueues serves POST /queues: {"name", "plugin"}.
func (h *handler) postQueues(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := p.object()
	if !ok {
		sendJSON(w, http.StatusBadRequest, obj{{"error", p.notObject()}})
		return
	}
	name, _ := o.get("name")
	plugin, _ := o.get("plugin")
	if !perlTrue(name) || !perlTrue(plugin) {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "name and plugin required"}})
		return
	}
	for _, f := range o {
		if f.k != "name" && f.k != "plugin" {
			sendJSON(w, http.StatusBadRequest, obj{{"error", "Invalid param"}, {"param", f.k}})
			return
		}
	}
	known, err := h.knownPlugin(r, plugin)
	if err != nil {
		h.dbError(w, r, "Could not get current plugins", err)
		return
	}
	if !known {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "Unknown plugin"}, {"plugin", plugin}})
		return
	}
	n, ok := name.(string)
	if !ok {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "name must be a string"}})
		return
	}
	id, dup, msg, err := h.createQueue(r.Context(), n, plugin.(string))
	if errors.Is(err, queue.ErrQueueName) {
		sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		return
	}
	if err != nil {
		h.dbError(w, r, "Could not create queue "+queue.ShownName(n), err)
		return
	}
	if dup != nil {
		sendJSON(w, http.StatusBadRequest, obj{{"MongoDB::DuplicateKeyError", dup}, {"id", nil}, {"error", msg}})
		return
	}
	sendJSON(w, http.StatusOK, obj{{"MongoDB::InsertOneResult", insertOneResult(oid(id))}, {"id", oid(id)}})
}

// findQueue returns the id of the queue ref names: its _id when ref looks
// like one, else its name; zero when there is none. Two queues of the
// name are an error.
func (h *handler) findQueue(ctx context.Context, ref string) (bson.ObjectID, error) {
	q, err := h.findQueueDoc(ctx, ref)
	return q.ID, err
}

// findQueueDoc is findQueue's queue, whole (the zero Queue when there is
// none).
func (h *handler) findQueueDoc(ctx context.Context, ref string) (queue.Queue, error) {
	q, _, err := h.store.FindQueue(ctx, ref)
	if errors.Is(err, queue.ErrNoQueue) {
		return queue.Queue{}, nil
	}
	if err != nil {
		return queue.Queue{}, err
	}
	if id, byID := idOf(ref); byID && q.ID != id {
		return queue.Queue{}, nil // a queue named like an id
	}
	return q, nil
}

// queueSettings checks POST /queues/:queue's parameters as the Perl web
// API does, then as den queue set does; the error is the answer.
func (h *handler) queueSettings(r *http.Request, o obj) (queue.QueueSettings, obj, error) {
	var s queue.QueueSettings
	if len(o) == 0 {
		return s, obj{{"error", "no params"}}, nil
	}
	for _, f := range o {
		if !slices.Contains([]string{"threads", "name", "plugin"}, f.k) {
			return s, obj{{"error", "unknown param"}, {"param", f.k}}, nil
		}
	}
	if plugin, ok := o.get("plugin"); ok {
		known, err := h.knownPlugin(r, plugin)
		if err != nil {
			return s, nil, err
		}
		if !known {
			return s, obj{{"error", "unknown plugin"}, {"plugin", plugin}}, nil
		}
	}
	if threads, ok := o.get("threads"); ok {
		n, ok := wholeNumber(threads)
		if !ok {
			return s, obj{{"error", "threads must be a non-negative integer"}}, nil
		}
		if n > maxLimit {
			return s, obj{{"error", "threads must be a non-negative integer, at most " + strconv.Itoa(maxLimit)}}, nil
		}
	}
	if name, ok := o.get("name"); ok {
		if n, isString := name.(string); !isString || n == "" || n == "0" {
			return s, obj{{"error", "name must be a string"}}, nil
		}
	}
	for _, f := range o {
		switch f.k {
		case "threads":
			n, _ := wholeNumber(f.v)
			s.Set = append(s.Set, bson.E{Key: queue.SettingThreads, Value: int32(n)})
		case "name":
			s.Set = append(s.Set, bson.E{Key: queue.SettingName, Value: f.v.(string)})
		case "plugin":
			s.Set = append(s.Set, bson.E{Key: queue.SettingPluginLater, Value: f.v.(string)})
		}
	}
	return s, nil, nil
}

// postQueue serves POST /queues/:queue: {"threads", "name", "plugin"},
// any of them. threads is the queue's limit on all nodes together;
// setting it removes maxthreads (a per-node limit den would read first),
// as den queue set threads=N does.
func (h *handler) postQueue(w http.ResponseWriter, r *http.Request, p params, args ...string) {
	o, ok := p.object()
	if !ok {
		sendJSON(w, http.StatusBadRequest, obj{{"error", p.notObject()}})
		return
	}
	s, refusal, err := h.queueSettings(r, o)
	if err != nil {
		h.dbError(w, r, "Could not get current plugins", err)
		return
	}
	if refusal != nil {
		sendJSON(w, http.StatusBadRequest, refusal)
		return
	}
	res, status, msg := h.updateQueue(r.Context(), args[0], s)
	out := obj{{"MongoDB::UpdateResult", updateResult(res)}}
	if msg != "" {
		out.set("error", msg)
	}
	sendJSON(w, status, out)
}

// updateQueue writes settings into the queue ref names; msg is the
// answer's error (status 400, or 500 for a database error).
func (h *handler) updateQueue(ctx context.Context, ref string, s queue.QueueSettings) (queue.UpdateResult, int, string) {
	id, err := h.findQueue(ctx, ref)
	if err != nil {
		return queue.UpdateResult{}, http.StatusBadRequest, err.Error()
	}
	if id.IsZero() {
		return queue.UpdateResult{}, http.StatusBadRequest, "queue not found"
	}
	res, err := h.store.UpdateQueueResult(ctx, id, s)
	switch {
	case errors.Is(err, queue.ErrNoQueue):
		return res, http.StatusBadRequest, "queue not found"
	case err != nil:
		h.log.Warn("dci: update queue", bsonID(id), errField(err))
		return res, http.StatusBadRequest, err.Error()
	}
	return res, http.StatusOK, ""
}

// deleteResult is a MongoDB::DeleteResult as the Perl web API writes it.
func deleteResult(n int64) obj {
	return obj{{"deleted_count", n}, {"write_errors", []any{}}, {"write_concern_errors", []any{}}}
}

// deleteQueue serves DELETE /queues/:queue. The queue's tasks stay, as
// with den queue delete; unlike it, queued and running tasks do not stop
// the delete (the Perl web API deleted regardless).
func (h *handler) deleteQueue(w http.ResponseWriter, r *http.Request, _ params, args ...string) {
	n, status, msg := h.removeQueue(r.Context(), args[0])
	out := obj{{"MongoDB::DeleteResult", deleteResult(n)}}
	if msg != "" {
		out.set("error", msg)
	}
	sendJSON(w, status, out)
}

func (h *handler) removeQueue(ctx context.Context, ref string) (int64, int, string) {
	id, err := h.findQueue(ctx, ref)
	if err != nil {
		return 0, http.StatusBadRequest, err.Error()
	}
	if id.IsZero() {
		return 0, http.StatusBadRequest, "queue not found"
	}
	switch err := h.store.DeleteQueue(ctx, id); {
	case errors.Is(err, queue.ErrNoQueue):
		return 0, http.StatusBadRequest, "queue not found"
	case err != nil:
		h.log.Warn("dci: delete queue", bsonID(id), errField(err))
		return 0, http.StatusInternalServerError, err.Error()
	}
	return 1, http.StatusOK, ""
}
