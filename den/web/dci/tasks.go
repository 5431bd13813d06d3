package dci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Creating tasks. The Perl web API inserted each task as {queue, status:
// -2, stdout: null, stderr: null, node: null, params, ctime, mtime}, all
// at once, and kept no counts. den inserts what den task add does, with
// the parameters under the name of the queue's schema (Queue.ParamsField:
// params in a Disbatch 4 queue, whose plugin is named by plugin, as the
// Perl web API writes them; parameters in a protocol queue, named by
// constructor; den finds either, queue.EitherParams) and node -1 (the
// protocol's; both nodes claim either), in batches (Options.Batch), each
// raising the queue's count_todo and count_total by exactly what landed.
// Every task's parameters are checked before anything is inserted.

// insertManyResult is a MongoDB::InsertManyResult as the Perl web API
// writes it.
func insertManyResult(ids []bson.ObjectID) obj {
	inserted := make([]any, len(ids))
	for i, id := range ids {
		inserted[i] = obj{{"index", int64(i)}, {"_id", oid(id)}}
	}
	return obj{{"acknowledged", int64(1)}, {"inserted", inserted}, {"write_errors", []any{}}, {"write_concern_errors", []any{}}}
}

// taskParams checks a list of task parameters (den's check: each an object
// with at least one key) and turns each into a document as den task add
// reads a line (MongoDB extended JSON allowed). The message is the
// answer's error.
func taskParams(list []any) ([]bson.Raw, string) {
	const notObjects = "params must be a JSON array of task params objects"
	if len(list) == 0 {
		return nil, notObjects
	}
	for _, v := range list {
		if _, ok := v.(obj); !ok {
			return nil, notObjects
		}
	}
	out := make([]bson.Raw, 0, len(list))
	for i, v := range list {
		if len(v.(obj)) == 0 {
			return nil, notObjects + " with key/value pairs"
		}
		var doc bson.Raw
		err := bson.UnmarshalExtJSON(encodeJSON(v, false), false, &doc)
		if err == nil {
			err = storableKeys(doc)
		}
		if err != nil {
			return nil, fmt.Sprintf("%s: task %d (index %d): %v", notObjects, i+1, i, err)
		}
		out = append(out, doc)
	}
	return out, ""
}

// insertTasks inserts tasks into a queue in batches; it returns the ids of
// those that landed (counted in the queue), and the error that stopped it.
func (h *handler) insertTasks(ctx context.Context, q queue.Queue, tasks []bson.Raw) ([]bson.ObjectID, error) {
	var ids []bson.ObjectID
	opts := queue.InsertOptions{Params: q.ParamsField() == queue.FieldParams}
	for start := 0; start < len(tasks); start += h.batch {
		end := min(start+h.batch, len(tasks))
		landed, err := h.store.InsertTasks(ctx, q.ID, tasks[start:end], h.now(), opts)
		ids = append(ids, landed...)
		if err != nil {
			return ids, fmt.Errorf("inserted %d of %d tasks (counted in count_todo/count_total); the others were not: %w", len(ids), len(tasks), err)
		}
	}
	return ids, nil
}

// postTasks serves POST /tasks/:queue: a JSON array of task parameters.
func (h *handler) postTasks(w http.ResponseWriter, r *http.Request, p params, args ...string) {
	list, _ := p.v.([]any)
	if p.bad != nil {
		list = nil
	}
	tasks, msg := taskParams(list)
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, obj{{"error", msg}})
		return
	}
	q, err := h.findQueueDoc(r.Context(), args[0])
	if err != nil {
		sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		return
	}
	id := q.ID
	if id.IsZero() {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "queue not found"}})
		return
	}
	ids, err := h.insertTasks(r.Context(), q, tasks)
	out := obj{{"MongoDB::InsertManyResult", insertManyResult(ids)}}
	if err != nil {
		h.log.Warn("dci: insert tasks", bsonID(id), errField(err))
		out.set("error", err.Error())
		sendJSON(w, http.StatusInternalServerError, out)
		return
	}
	sendJSON(w, http.StatusOK, out)
}

// collectionName checks the collection POST /tasks/:queue/:collection
// reads: a name MongoDB allows, not a system collection.
func collectionName(name string) error {
	switch {
	case strings.HasPrefix(name, "system."):
		return fmt.Errorf("collection %q: system collections are not read", name)
	case strings.ContainsAny(name, "$\x00"):
		return fmt.Errorf("collection %q: not a collection name", name)
	}
	return nil
}

// fromDocuments makes a task per document of a collection: params is the
// template; a value "document.FIELD" is replaced by that field of the
// document (null when it has none; a dotted FIELD is a path, where the
// Perl web API found only top-level fields). Tasks are inserted in
// batches as documents are read; it returns the ids of those inserted.
func (h *handler) fromDocuments(ctx context.Context, q queue.Queue, coll string, filter bson.D, template obj) ([]bson.ObjectID, error) {
	projection := bson.D{}
	for _, f := range template {
		if s, ok := f.v.(string); ok && strings.HasPrefix(s, "document.") {
			name := strings.TrimPrefix(s, "document.")
			projection = append(projection, bson.E{Key: name, Value: 1})
		}
	}
	if len(projection) == 0 {
		projection = nil
	}
	var ids []bson.ObjectID
	var batch []bson.Raw
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		landed, err := h.insertTasks(ctx, q, batch)
		ids = append(ids, landed...)
		batch = batch[:0]
		return err
	}
	err := h.store.EachDocument(ctx, coll, filter, projection, func(doc bson.Raw) error {
		task := bson.D{}
		for _, f := range template {
			s, ok := f.v.(string)
			if name, isField := strings.CutPrefix(s, "document."); ok && isField {
				v, err := doc.LookupErr(strings.Split(name, ".")...)
				if err != nil {
					task = append(task, bson.E{Key: f.k, Value: nil})
				} else {
					task = append(task, bson.E{Key: f.k, Value: v})
				}
				continue
			}
			x, err := toBSON(f.v)
			if err != nil {
				return err
			}
			task = append(task, bson.E{Key: f.k, Value: x})
		}
		raw, err := bson.Marshal(task)
		if err != nil {
			return fmt.Errorf("make a task of document %s: %w", queue.DocID(doc), err)
		}
		if batch = append(batch, raw); len(batch) >= h.batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return ids, err
}

// postTasksFromCollection serves POST /tasks/:queue/:collection:
// {"filter": {...}, "params": {...}}, a task per document of the
// collection that filter matches.
func (h *handler) postTasksFromCollection(w http.ResponseWriter, r *http.Request, p params, args ...string) {
	o, _ := p.v.(obj)
	filterV, _ := o.get("filter")
	templateV, _ := o.get("params")
	filterO, ok1 := filterV.(obj)
	template, ok2 := templateV.(obj)
	if p.bad != nil || !ok1 || !ok2 {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "filter and params required and must be name/value objects"}})
		return
	}
	q, err := h.findQueueDoc(r.Context(), args[0])
	if err != nil {
		sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		return
	}
	id := q.ID
	if id.IsZero() {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "queue not found"}})
		return
	}
	filter, msg := queryFilter(filterO)
	if msg == "" {
		if err := collectionName(args[1]); err != nil {
			msg = err.Error()
		}
	}
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, obj{{"error", msg}})
		return
	}
	ids, err := h.fromDocuments(r.Context(), q, args[1], filter, template)
	out := obj{{"MongoDB::InsertManyResult", insertManyResult(ids)}}
	switch {
	case err != nil:
		var bad errBadOID
		status := http.StatusInternalServerError
		if errors.As(err, &bad) {
			status = http.StatusBadRequest
		}
		h.log.Warn("dci: tasks from a collection", bsonID(id), errField(err))
		out.set("error", "Could not iterate on collection "+args[1]+": "+err.Error())
		sendJSON(w, status, out)
	case len(ids) == 0:
		out.set("error", "no tasks: the filter matched no document of collection "+args[1])
		sendJSON(w, http.StatusBadRequest, out)
	default:
		sendJSON(w, http.StatusOK, out)
	}
}

// storableKeys refuses a document MongoDB would refuse to store: a key
// that starts with $ (what is left of extended JSON's $oid, $date, ...
// once read is a value, not a key). Checked for every task before any is
// inserted, so that a post is inserted whole or not at all.
func storableKeys(doc bson.Raw) error {
	elems, err := doc.Elements()
	if err != nil {
		return err
	}
	for _, e := range elems {
		if strings.HasPrefix(e.Key(), "$") {
			return fmt.Errorf("key %q: MongoDB stores no key that starts with $", e.Key())
		}
		v := e.Value()
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			err = storableKeys(v.Document())
		case bson.TypeArray:
			err = storableKeys(bson.Raw(v.Array()))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
