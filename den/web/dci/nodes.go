package dci

import (
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// looksLikeID is what the Perl web API takes for an _id in a path
// (:node, :queue); anything else is a name.
var looksLikeID = regexp.MustCompile(`\A[0-9a-f]{24}\z`)

// idOf returns the ObjectId ref names when it looks like one.
func idOf(ref string) (bson.ObjectID, bool) {
	if !looksLikeID.MatchString(ref) {
		return bson.ObjectID{}, false
	}
	id, err := bson.ObjectIDFromHex(ref)
	return id, err == nil
}

// nodeObj is a node document as GET /nodes answers it: the document with
// id, its _id as text, and timestamp in milliseconds since the epoch.
func nodeObj(n queue.NodeDoc) obj {
	o := docToObj(n.Raw)
	if ms, ok := n.TimestampMillis(); ok {
		o.set("timestamp", ms)
	}
	id := n.ID()
	if oid, ok := id.ObjectIDOK(); ok {
		o.set("id", oid.Hex())
	} else {
		o.set("id", scalarOf(fromBSON(id)))
	}
	return o
}

// scalarOf is a value as Perl stringifies it in "$x".
func scalarOf(v any) any {
	switch v := v.(type) {
	case nil, string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return string(encodeJSON(v, false))
}

// getNodes serves GET /nodes: every node document, by name.
func (h *handler) getNodes(w http.ResponseWriter, r *http.Request, _ params, _ ...string) {
	nodes, err := h.store.Nodes(r.Context())
	if err != nil {
		h.dbError(w, r, "Could not get current nodes", err)
		return
	}
	out := []any{}
	for _, n := range nodes {
		out = append(out, nodeObj(n))
	}
	sendJSON(w, http.StatusOK, out)
}

// findNode returns the node document ref names: its _id when it looks
// like one, else its name.
func (h *handler) findNode(r *http.Request, ref string) (queue.NodeDoc, bool, error) {
	nodes, err := h.store.Nodes(r.Context())
	if err != nil {
		return queue.NodeDoc{}, false, err
	}
	id, byID := idOf(ref)
	for _, n := range nodes {
		if byID {
			if got, ok := n.ID().ObjectIDOK(); ok && got == id {
				return n, true, nil
			}
		} else if n.NamedAs(ref) {
			return n, true, nil
		}
	}
	return queue.NodeDoc{}, false, nil
}

// getNode serves GET /nodes/:node. An unknown node is a 404 with an
// error (the Perl web API failed to encode its undef: a 500).
func (h *handler) getNode(w http.ResponseWriter, r *http.Request, _ params, args ...string) {
	n, ok, err := h.findNode(r, args[0])
	if err != nil {
		h.dbError(w, r, "Could not get node "+args[0], err)
		return
	}
	if !ok {
		sendJSON(w, http.StatusNotFound, obj{{"error", "node not found"}, {"node", args[0]}})
		return
	}
	sendJSON(w, http.StatusOK, nodeObj(n))
}

// updateResult is a MongoDB::UpdateResult as the Perl web API writes it.
func updateResult(res queue.UpdateResult) obj {
	return obj{{"matched_count", res.Matched}, {"modified_count", res.Modified}, {"upserted_id", nil},
		{"write_errors", []any{}}, {"write_concern_errors", []any{}}}
}

// maxLimit is the largest maxthreads or threads den writes (as den queue
// set and den node set).
const maxLimit = 1 << 20

// wholeNumber reads a non-negative whole number as the Perl web API
// checks one (/^\d+$/ on its text): a JSON number or a string of digits.
func wholeNumber(v any) (int, bool) {
	s, ok := scalarText(v)
	if !ok || s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxLimit {
		return maxLimit + 1, true
	}
	return n, true
}

// postNode serves POST /nodes/:node: {"maxthreads": N or null}.
func (h *handler) postNode(w http.ResponseWriter, r *http.Request, p params, args ...string) {
	o, ok := p.object()
	if !ok {
		sendJSON(w, http.StatusBadRequest, obj{{"error", p.notObject()}})
		return
	}
	if len(o) == 0 {
		sendJSON(w, http.StatusBadRequest, obj{{"error", "No params"}})
		return
	}
	for _, f := range o {
		if f.k != "maxthreads" {
			sendJSON(w, http.StatusBadRequest, obj{{"error", "Invalid param"}, {"param", f.k}})
			return
		}
	}
	v, _ := o.get("maxthreads")
	var limit *int
	if v != nil {
		n, ok := wholeNumber(v)
		if !ok {
			sendJSON(w, http.StatusBadRequest, obj{{"error", "maxthreads must be a non-negative integer or null"}})
			return
		}
		if n > maxLimit {
			sendJSON(w, http.StatusBadRequest, obj{{"error", "maxthreads must be a non-negative integer or null, at most " + strconv.Itoa(maxLimit)}})
			return
		}
		limit = &n
	}
	id, _ := idOf(args[0])
	res, err := h.store.SetNodeLimit(r.Context(), id, args[0], limit)
	if err != nil {
		h.dbError(w, r, "Could not update node "+args[0], err)
		return
	}
	out := obj{{"MongoDB::UpdateResult", updateResult(res)}}
	if res.Matched != 1 {
		out.set("error", updateResult(res))
		sendJSON(w, http.StatusBadRequest, out)
		return
	}
	sendJSON(w, http.StatusOK, out)
}

// livePlugins are the plugins GET /plugins lists: those live den nodes
// say they serve (queue.FieldPlugins), and the configured ones
// (Options.Plugins), sorted.
func (h *handler) livePlugins(r *http.Request) ([]string, error) {
	nodes, err := h.store.Nodes(r.Context())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := []string{}
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, name := range h.plugins {
		add(name)
	}
	now := h.now()
	for _, n := range nodes {
		if !n.Live(now, h.dead) {
			continue
		}
		list, ok := n.Raw.Lookup(queue.FieldPlugins).ArrayOK()
		if !ok {
			continue
		}
		vals, _ := list.Values()
		for _, v := range vals {
			if s, ok := v.StringValueOK(); ok {
				add(s)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// getPlugins serves GET /plugins: the plugins a queue may be created
// with. The Perl web API listed its configuration's plugins.
func (h *handler) getPlugins(w http.ResponseWriter, r *http.Request, _ params, _ ...string) {
	list, err := h.livePlugins(r)
	if err != nil {
		h.dbError(w, r, "Could not get current plugins", err)
		return
	}
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	sendJSON(w, http.StatusOK, out)
}

// knownPlugin reports whether a queue may use plugin.
func (h *handler) knownPlugin(r *http.Request, plugin any) (bool, error) {
	s, ok := plugin.(string)
	if !ok {
		return false, nil
	}
	list, err := h.livePlugins(r)
	return slices.Contains(list, s), err
}
