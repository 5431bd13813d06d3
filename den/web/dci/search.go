package dci

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

// SearchLimit is the most tasks POST /tasks/search returns, and its
// default (the Perl web API's $LIMIT).
const SearchLimit = 100

// OldSearchLimit bounds POST /search-tasks-json, which the Perl web API
// left unbounded: at most this many tasks, whatever limit asks (the
// 100 of /tasks/search, Disbatch 4's search).
const OldSearchLimit = SearchLimit

// MaxOutput is the most of a stream a search shows when it reads output
// from GridFS (terse off); the rest is cut with a note.
const MaxOutput = 1 << 20

// forbidden are query operators that run code on the database server:
// a search is a read that needs no token, so it may not ask for them.
var forbidden = []string{"$where", "$function", "$accumulator"}

// checkOperators refuses a filter, sort or projection (what) that names
// a forbidden operator at any depth.
func checkOperators(what string, v any) string {
	switch v := v.(type) {
	case obj:
		for _, f := range v {
			for _, op := range forbidden {
				if f.k == op {
					return what + ": " + op + " is not allowed: it runs code on the database server"
				}
			}
			if msg := checkOperators(what, f.v); msg != "" {
				return msg
			}
		}
	case []any:
		for _, x := range v {
			if msg := checkOperators(what, x); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// millisecondDate turns a number that looks like milliseconds since the
// epoch (more than 9999999999, as Disbatch's page sends dates) into a date.
func millisecondDate(v any) any {
	if f, ok := number(v); ok && f > 9999999999 {
		if _, isText := v.(string); !isText {
			return time.UnixMilli(int64(f)).UTC()
		}
	}
	return v
}

// queryFilter turns a search's filter into a MongoDB query as the Perl
// web API did: {"$oid": HEX} anywhere is that ObjectId, and a ctime or
// mtime in milliseconds is that date, also as the value of an operator
// ({"ctime": {"$gt": MS}}; the Perl web API took the address of the
// operator's hash for a number there). msg is the answer's error.
func queryFilter(f obj) (bson.D, string) {
	if msg := checkOperators("filter", f); msg != "" {
		return nil, msg
	}
	f = append(obj(nil), f...)
	for _, k := range []string{"ctime", "mtime"} {
		v, ok := f.get(k)
		if !ok {
			continue
		}
		if ops, isObj := v.(obj); isObj {
			if _, isOID := ops.get("$oid"); !isOID {
				conv := make(obj, len(ops))
				for i, op := range ops {
					conv[i] = field{op.k, millisecondDate(op.v)}
				}
				f.set(k, conv)
			}
			continue
		}
		f.set(k, millisecondDate(v))
	}
	d, err := toBSON(f)
	if err != nil {
		return nil, "Bad OID passed: " + err.Error()
	}
	return d.(bson.D), ""
}

// findOptions reads a search's options: limit (at most SearchLimit; 0 or
// none is SearchLimit, where the Perl web API let 0 mean all), skip, sort,
// projection (or fields). Other options of MongoDB's find are refused.
func findOptions(o obj) (sort, projection bson.D, skip, limit int64, msg string) {
	limit = SearchLimit
	for _, f := range o {
		switch f.k {
		case "limit":
			if f.v == nil {
				continue
			}
			n, ok := number(f.v)
			if !ok || n != math.Trunc(n) {
				return nil, nil, 0, 0, "limit must be a whole number"
			}
			if n > SearchLimit {
				return nil, nil, 0, 0, fmt.Sprintf("limit cannot exceed %d", SearchLimit)
			}
			if n = math.Abs(n); n > 0 && n <= SearchLimit {
				limit = int64(n)
			}
		case "skip":
			n, ok := number(f.v)
			if !ok || n < 0 || n != math.Trunc(n) {
				return nil, nil, 0, 0, "skip must be a whole number, 0 or more"
			}
			skip = int64(n)
		case "sort", "projection", "fields":
			spec, ok := f.v.(obj)
			if !ok {
				return nil, nil, 0, 0, f.k + " must be a name/value object"
			}
			if msg := checkOperators(f.k, spec); msg != "" {
				return nil, nil, 0, 0, msg
			}
			d, err := toBSON(spec)
			if err != nil {
				return nil, nil, 0, 0, f.k + ": " + err.Error()
			}
			if f.k == "sort" {
				sort = d.(bson.D)
			} else {
				projection = d.(bson.D)
			}
		default:
			return nil, nil, 0, 0, fmt.Sprintf("option %s is not supported (den takes limit, skip, sort and projection)", f.k)
		}
	}
	return sort, projection, skip, limit, ""
}

// outputBudget is what one answer may still read of output from GridFS
// (MaxAnswerOutput in all).
type outputBudget struct{ left int64 }

// readOutput reads a GridFS file of output, at most MaxOutput of it and
// what is left of the answer's budget.
func (h *handler) readOutput(ctx context.Context, id bson.ObjectID, budget *outputBudget) (string, error) {
	if budget.left <= 0 {
		return fmt.Sprintf("[den: output not read: this answer holds %d bytes of output already, its most; search fewer tasks, or den output prints it]\n", MaxAnswerOutput), nil
	}
	most := min(MaxOutput, budget.left)
	rd, err := gridfs.NewBucket(h.db, queue.GridFSPrefix).Open(ctx, id)
	if err != nil {
		return "", err
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, most+1))
	if err != nil {
		return "", err
	}
	if int64(len(data)) > most {
		budget.left = 0
		return string(data[:most]) + fmt.Sprintf("\n[den: output cut at %d bytes; den output prints it whole]\n", most), nil
	}
	budget.left -= int64(len(data))
	return string(data), nil
}

// searchTasks serves POST /tasks/search: {"filter", "options", "count",
// "terse", "pretty"}.
func (h *handler) searchTasks(w http.ResponseWriter, r *http.Request, p params, _ ...string) {
	o, ok := p.object()
	if !ok {
		sendJSON(w, http.StatusBadRequest, obj{{"error", p.notObject()}})
		return
	}
	filterV, _ := o.get("filter")
	optionsV, _ := o.get("options")
	if filterV == nil {
		filterV = obj{}
	}
	if optionsV == nil {
		optionsV = obj{}
	}
	filterO, ok1 := filterV.(obj)
	optionsO, ok2 := optionsV.(obj)
	if !ok1 || !ok2 {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "filter and options must be name/value objects"}})
		return
	}
	count, _ := o.get("count")
	pretty, _ := o.get("pretty")
	terse := true
	if v, ok := o.get("terse"); ok && v != nil {
		terse = perlTrue(v)
	}
	sort, projection, skip, limit, msg := findOptions(optionsO)
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, obj{{"error", msg}})
		return
	}
	if q, ok := filterO.get("queue"); ok {
		if s, isText := scalarText(q); isText {
			filterO = append(obj(nil), filterO...)
			filterO.set("queue", obj{{"$oid", s}})
		}
	}
	filter, msg := queryFilter(filterO)
	if msg != "" {
		sendJSON(w, http.StatusBadRequest, obj{{"error", msg}})
		return
	}
	if perlTrue(count) {
		n, err := h.store.CountTasksMatching(r.Context(), filter)
		switch {
		case err == nil:
			sendJSON(w, http.StatusOK, obj{{"count", n}})
		case !h.dbFailed(w, r, err):
			sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		}
		return
	}
	docs, err := h.store.SearchTasks(r.Context(), filter, sort, projection, skip, limit)
	if err != nil {
		if !h.dbFailed(w, r, err) {
			sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		}
		return
	}
	out := make([]any, 0, len(docs))
	budget := &outputBudget{left: MaxAnswerOutput}
	for _, raw := range docs {
		t := docToObj(raw)
		for _, k := range []string{"stdout", "stderr"} {
			v := raw.Lookup(k)
			switch {
			case terse && v.Type == bson.TypeString && v.StringValue() != "":
				t.set(k, "[terse mode]")
			case !terse && v.Type == bson.TypeObjectID:
				if text, err := h.readOutput(r.Context(), v.ObjectID(), budget); err == nil {
					t.set(k, text)
				} else {
					h.log.Warn("dci: could not get a task's output", fieldTask(raw), errField(err))
				}
			}
		}
		for _, k := range []string{"ctime", "mtime"} {
			if v := raw.Lookup(k); v.Type == bson.TypeDateTime {
				t.set(k, perlFloat(float64(v.DateTime())/1000)) // DateTime's hires_epoch
			}
		}
		out = append(out, t)
	}
	sendJSONPretty(w, http.StatusOK, out, perlTrue(pretty))
}
