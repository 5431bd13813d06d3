package dci

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// The older routes, which Disbatch 3's page called and 4.0 kept: answers
// are arrays whose first element is 1 on success and 0 on failure (or
// objects with success), with the Perl web API's statuses (some failures
// are a 200 with [0, why]).

// schedulerJSON serves GET /scheduler-json: GET /queues (on a database
// error, an empty list, as the Perl web API answered).
func (h *handler) schedulerJSON(w http.ResponseWriter, r *http.Request, _ params, _ ...string) {
	list, _, err := h.queueEntries(r.Context())
	if err != nil {
		h.log.Warn("dci: could not find queues", errField(err))
		list = []any{}
	}
	sendJSON(w, http.StatusOK, list)
}

// queuePrototypesJSON serves GET /queue-prototypes-json: {plugin: plugin}
// for the plugins of GET /plugins, which /start-queue-json accepts, as
// the Perl web API answered both from its configuration's plugins.
func (h *handler) queuePrototypesJSON(w http.ResponseWriter, r *http.Request, _ params, _ ...string) {
	list, err := h.livePlugins(r)
	if err != nil {
		h.log.Warn("dci: could not get current plugins", errField(err))
	}
	out := obj{}
	for _, p := range list {
		out.set(p, p)
	}
	sendJSON(w, http.StatusOK, out)
}

// startQueueJSON serves POST /start-queue-json: type (the plugin) and name.
func (h *handler) startQueueJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := oldObject(w, p)
	if !ok {
		return
	}
	vals, ok := oldRequire(w, o, "type and name required", "type", "name")
	if !ok {
		return
	}
	typ, name := vals[0], vals[1]
	plugins, err := h.livePlugins(r)
	if err != nil {
		h.dbError(w, r, "Could not get current plugins", err)
		return
	}
	t, isText := typ.(string)
	known := false
	for _, p := range plugins {
		known = known || (isText && p == t)
	}
	if !known {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), "unknown type"})
		return
	}
	n, ok := name.(string)
	if !ok || n == "" {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), "name must be a string"})
		return
	}
	id, dup, msg, err := h.createQueue(r.Context(), n, t)
	if errors.Is(err, queue.ErrQueueName) {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), err.Error()})
		return
	}
	if err != nil {
		h.dbError(w, r, "Could not create queue "+queue.ShownName(n), err)
		return
	}
	if dup != nil {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), nil, obj{{"success", int64(0)}, {"MongoDB::DuplicateKeyError", dup}, {"error", msg}}})
		return
	}
	sendJSON(w, http.StatusOK, []any{int64(1), oid(id), obj{{"success", int64(1)}, {"MongoDB::InsertOneResult", insertOneResult(oid(id))}}})
}

// oldQueueID reads a queue id the older routes take; the message says
// why it is none.
func oldQueueID(v any) (bson.ObjectID, string) {
	s, _ := scalarText(v)
	id, err := bson.ObjectIDFromHex(s)
	if err != nil {
		return id, describe(v) + " is not a queue id: want 24 hexadecimal digits"
	}
	return id, ""
}

// setQueueAttrJSON serves POST /set-queue-attr-json: attr (threads),
// value and queueid.
func (h *handler) setQueueAttrJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	fail := func(status int, msg string) {
		sendJSON(w, status, obj{{"success", int64(0)}, {"error", msg}})
	}
	o, ok := p.object()
	if !ok {
		fail(http.StatusBadRequest, p.notObject())
		return
	}
	attr, _ := o.get("attr")
	value, _ := o.get("value")
	queueID, _ := o.get("queueid")
	switch {
	case attr != "threads":
		fail(http.StatusBadRequest, "Invalid attr")
		return
	case value == nil:
		fail(http.StatusBadRequest, "You must supply a value")
		return
	case queueID == nil:
		fail(http.StatusBadRequest, "You must supply a queueid")
		return
	}
	id, msg := oldQueueID(queueID)
	if msg != "" {
		fail(http.StatusBadRequest, msg)
		return
	}
	s, refusal, err := h.queueSettings(r, obj{{"threads", value}})
	if err != nil {
		h.dbError(w, r, "Could not update queue", err)
		return
	}
	if refusal != nil {
		e, _ := refusal.get("error")
		fail(http.StatusBadRequest, e.(string))
		return
	}
	res, status, msg := h.updateQueue(r.Context(), id.Hex(), s)
	out := obj{{"success", int64(0)}, {"MongoDB::UpdateResult", updateResult(res)}}
	if msg != "" {
		out.set("error", msg)
	} else {
		out.set("success", int64(1))
	}
	sendJSON(w, status, out)
}

// deleteQueueJSON serves POST /delete-queue-json: id.
func (h *handler) deleteQueueJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := oldObject(w, p)
	if !ok {
		return
	}
	vals, ok := oldRequire(w, o, "id required", "id")
	if !ok {
		return
	}
	v := vals[0]
	id, msg := oldQueueID(v)
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), msg})
		return
	}
	n, status, msg := h.removeQueue(r.Context(), id.Hex())
	out := obj{{"success", n}, {"MongoDB::DeleteResult", deleteResult(n)}}
	if msg != "" {
		out.set("error", msg)
	}
	sendJSON(w, status, []any{n, out})
}

// jsonParam reads a parameter the older routes take as JSON: a value
// given in a JSON body as it is, text (a form's field) decoded within
// lim; msg is the decoder's complaint, over set when the JSON is over lim.
func jsonParam(v any, lim jsonLimits) (x any, msg string, over *jsonLimitError) {
	s, ok := v.(string)
	if !ok {
		return v, "", nil
	}
	x, err := decodeJSON([]byte(s), lim)
	if errors.As(err, &over) {
		return nil, err.Error(), over
	}
	if err != nil {
		return nil, "not JSON: " + err.Error(), nil
	}
	return x, "", nil
}

// oldQueue finds the queue the older routes name by id or name: unlike
// the Perl web API, which took any id for a queue, the queue must exist.
func (h *handler) oldQueue(ctx context.Context, v any) (queue.Queue, error) {
	s, _ := scalarText(v)
	return h.findQueueDoc(ctx, s)
}

// queueCreateTasksJSON serves POST /queue-create-tasks-json: queueid and
// object, a JSON array of task parameters.
func (h *handler) queueCreateTasksJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := oldObject(w, p)
	if !ok {
		return
	}
	vals, ok := oldRequire(w, o, "queueid and object required", "queueid", "object")
	if !ok {
		return
	}
	queueID, objectV := vals[0], vals[1]
	object, msg, _ := jsonParam(objectV, writeJSON)
	if msg != "" {
		sendJSON(w, http.StatusOK, []any{int64(0), msg})
		return
	}
	list, isArray := object.([]any)
	if !isArray {
		sendJSON(w, http.StatusOK, []any{int64(0), "object param must be a JSON array"})
		return
	}
	q, ok := h.oldQueueFound(w, r, queueID)
	if !ok {
		return
	}
	id := q.ID
	var ids []bson.ObjectID
	var err error
	if len(list) > 0 {
		tasks, msg := taskParams(list)
		if msg != "" {
			sendJSON(w, http.StatusBadRequest, []any{int64(0), msg})
			return
		}
		ids, err = h.insertTasks(r.Context(), q, tasks)
	}
	res := insertManyResult(ids)
	out := []any{int64(1), int64(len(ids))}
	inserted, _ := res.get("inserted")
	out = append(out, inserted.([]any)...)
	status := http.StatusOK
	switch {
	case err != nil:
		h.log.Warn("dci: insert tasks", bsonID(id), errField(err))
		out[0], status = int64(0), http.StatusInternalServerError
		out = append(out, obj{{"success", int64(0)}, {"MongoDB::InsertManyResult", res}, {"error", err.Error()}})
	case len(ids) == 0:
		out[0], status = int64(0), http.StatusBadRequest
		out = append(out, obj{{"success", int64(0)}, {"MongoDB::InsertManyResult", res}, {"error", "no tasks: object is an empty array"}})
	default:
		out = append(out, obj{{"success", int64(1)}, {"MongoDB::InsertManyResult", res}})
	}
	sendJSON(w, status, out)
}

// queueCreateTasksFromQueryJSON serves POST
// /queue-create-tasks-from-query-json: queueid, collection, jsonfilter
// and params, as POST /tasks/:queue/:collection.
func (h *handler) queueCreateTasksFromQueryJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := oldObject(w, p)
	if !ok {
		return
	}
	vals, ok := oldRequire(w, o, "queueid, collection, jsonfilter, and params required", "queueid", "collection", "jsonfilter", "params")
	if !ok {
		return
	}
	queueID, collV, filterV, paramsV := vals[0], vals[1], vals[2], vals[3]
	filterX, msg, _ := jsonParam(filterV, writeJSON)
	if msg != "" {
		sendJSON(w, http.StatusOK, []any{int64(0), msg})
		return
	}
	templateX, msg, _ := jsonParam(paramsV, writeJSON)
	if msg != "" {
		sendJSON(w, http.StatusOK, []any{int64(0), msg})
		return
	}
	filterO, ok1 := filterX.(obj)
	template, ok2 := templateX.(obj)
	coll, ok3 := collV.(string)
	if !ok1 || !ok2 || !ok3 {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), "jsonfilter and params must be JSON objects, and collection a name"})
		return
	}
	q, ok := h.oldQueueFound(w, r, queueID)
	if !ok {
		return
	}
	id := q.ID
	filter, msg := queryFilter(filterO)
	if msg == "" {
		if err := collectionName(coll); err != nil {
			msg = err.Error()
		}
	}
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), msg})
		return
	}
	ids, err := h.fromDocuments(r.Context(), q, coll, filter, template)
	switch {
	case err != nil:
		h.log.Warn("dci: tasks from a collection", bsonID(id), errField(err))
		sendJSON(w, http.StatusInternalServerError, []any{int64(0), "Could not iterate on collection " + coll + ": " + err.Error()})
	case len(ids) == 0:
		sendJSON(w, http.StatusBadRequest, []any{int64(0), int64(0)})
	default:
		sendJSON(w, http.StatusOK, []any{int64(1), int64(len(ids))})
	}
}

// searchTasksJSON serves POST /search-tasks-json: filter (an object, or
// JSON text), queue, limit, skip, count, terse, json. Dates are seconds
// since the epoch with ctime_str and mtime_str beside them; at most
// OldSearchLimit tasks.
func (h *handler) searchTasksJSON(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := oldObject(w, p)
	if !ok {
		return
	}
	filterO, msg, over := searchFilter(o)
	if over != nil {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "filter: " + over.Error()}})
		return
	}
	if msg != "" {
		sendJSON(w, http.StatusOK, []any{int64(0), msg})
		return
	}
	filter, msg := queryFilter(filterO)
	if msg != "" {
		sendJSON(w, http.StatusOK, []any{int64(0), msg})
		return
	}
	if c, _ := o.get("count"); perlTrue(c) {
		n, err := h.store.CountTasksMatching(r.Context(), filter)
		switch {
		case err == nil:
			sendJSON(w, http.StatusOK, []any{int64(1), n})
		case !h.dbFailed(w, r, err):
			sendJSON(w, http.StatusOK, []any{int64(0), err.Error()})
		}
		return
	}
	skip, limit := searchPage(o)
	docs, err := h.store.SearchTasks(r.Context(), filter, nil, nil, skip, limit)
	if err != nil {
		if h.dbFailed(w, r, err) {
			return
		}
		h.log.Warn("dci: could not find tasks", errField(err))
		docs = nil
	}
	terseV, _ := o.get("terse")
	terse := perlTrue(terseV)
	out := make([]any, 0, len(docs))
	budget := &outputBudget{left: MaxAnswerOutput}
	for _, raw := range docs {
		t := docToObj(raw)
		h.setOutputs(r.Context(), &t, raw, terse, budget)
		setTimes(&t, raw)
		out = append(out, t)
	}
	sendJSON(w, http.StatusOK, out)
}

// searchFilter is the task filter of a /search-tasks-json request, as
// the Perl DCI builds it: the filter parameter (an object, or JSON of one)
// with queue and id as ObjectIDs and status as a number; or the message
// the route answers with when there is none; over when the filter's JSON
// is over a read's limits.
func searchFilter(o obj) (obj, string, *jsonLimitError) {
	filterV, _ := o.get("filter")
	if filterV == nil {
		filterV = obj{}
	}
	filterX, msg, over := jsonParam(filterV, readJSON)
	if over != nil {
		return nil, "", over
	}
	filterO, isObj := filterX.(obj)
	if !isObj {
		if wantMsg, _ := o.get("json"); !perlTrue(wantMsg) || msg == "" {
			msg = "JSON object required for filter"
		}
		return nil, msg, nil
	}
	filterO = append(obj(nil), filterO...)
	if q, _ := o.get("queue"); perlTrue(q) {
		s, _ := scalarText(q)
		filterO.set("queue", obj{{"$oid", s}})
	}
	if v, _ := filterO.get("id"); perlTrue(v) {
		s, _ := scalarText(v)
		filterO.del("id")
		filterO.set("_id", obj{{"$oid", s}})
	}
	if v, ok := filterO.get("status"); ok && v != nil {
		n, _ := number(v)
		filterO.set("status", int64(n))
	}
	return filterO, "", nil
}

// searchPage is the skip and limit of a /search-tasks-json request: a
// limit between 1 and OldSearchLimit (else OldSearchLimit), a positive
// skip (else none).
func searchPage(o obj) (skip, limit int64) {
	limit = int64(OldSearchLimit)
	if v, _ := o.get("limit"); perlTrue(v) {
		if n, ok := number(v); ok && n > 0 && n < OldSearchLimit {
			limit = int64(n)
		}
	}
	if v, _ := o.get("skip"); perlTrue(v) {
		if n, ok := number(v); ok && n > 0 {
			skip = int64(n)
		}
	}
	return skip, limit
}

// setOutputs puts a found task's stdout and stderr in t: the text of a
// GridFS file unless terse (within the answer's budget), "[terse mode]"
// for text when terse.
func (h *handler) setOutputs(ctx context.Context, t *obj, raw bson.Raw, terse bool, budget *outputBudget) {
	for _, k := range []string{"stdout", "stderr"} {
		v := raw.Lookup(k)
		switch {
		case v.Type == bson.TypeObjectID && !terse:
			if text, err := h.readOutput(ctx, v.ObjectID(), budget); err == nil {
				t.set(k, text)
			} else {
				h.log.Warn("dci: could not get a task's output", fieldTask(raw), errField(err))
			}
		case v.Type != bson.TypeObjectID && terse:
			t.set(k, "[terse mode]")
		}
	}
}

// setTimes adds a found task's ctime_str and mtime_str to t, and its
// ctime and mtime as the Perl DCI shows them.
func setTimes(t *obj, raw bson.Raw) {
	for _, k := range []string{"ctime", "mtime"} {
		v := raw.Lookup(k)
		if !perlTrue(fromBSON(v)) {
			continue
		}
		switch v.Type {
		case bson.TypeDateTime:
			t.set(k+"_str", perlDate(v.Time()))
			t.set(k, v.Time().Unix())
		case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
			f, _ := number(string(encodeJSON(fromBSON(v), false)))
			t.set(k+"_str", perlDate(time.Unix(int64(f), 0)))
		default:
			t.set(k+"_str", scalarOf(fromBSON(v)))
			t.set(k, nil)
		}
	}
}

// oldObject returns the parameters of an older route's request, which
// must be an object; else it answers 400 with [0, the reason], as the Perl
// DCI does, and returns false.
func oldObject(w http.ResponseWriter, p params) (obj, bool) {
	o, ok := p.object()
	if !ok {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), p.notObject()})
	}
	return o, ok
}

// oldRequire returns the values of the named parameters of o, in order;
// when one is missing or null it answers 400 with [0, missing] (the Perl
// DCI's words for the route) and returns false.
func oldRequire(w http.ResponseWriter, o obj, missing string, names ...string) ([]any, bool) {
	vals := make([]any, len(names))
	for i, name := range names {
		vals[i], _ = o.get(name)
		if vals[i] == nil {
			sendJSON(w, http.StatusBadRequest, []any{int64(0), missing})
			return nil, false
		}
	}
	return vals, true
}

// oldQueueFound returns the id of the queue an older route's queueid
// names; else it answers as the Perl DCI does (400 with the reason for a
// value that is no id, "Queue not found" for no such queue) and returns
// false.
func (h *handler) oldQueueFound(w http.ResponseWriter, r *http.Request, queueID any) (queue.Queue, bool) {
	q, err := h.oldQueue(r.Context(), queueID)
	if err != nil {
		sendJSON(w, http.StatusBadRequest, []any{int64(0), err.Error()})
		return q, false
	}
	if q.ID.IsZero() {
		sendJSON(w, http.StatusOK, []any{int64(0), "Queue not found"})
		return q, false
	}
	return q, true
}
