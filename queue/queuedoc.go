package queue

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Sort orders a queue may ask for. The sort is on the tasks' _id.
const (
	SortDefault = "default"
	SortFIFO    = "fifo"
	SortLIFO    = "lifo"
)

// Queue is a parsed queue document.
//
// The protocol spells the plugin `constructor` and the per-node limit
// `maxthreads`; later Disbatch 4 releases write `plugin` and `threads`. Both
// spellings are accepted; the protocol's wins when both are present.
//
// The two limits do not mean the same thing to the Perl nodes that write
// them: `maxthreads` caps the tasks of the queue on each node, while the
// later `threads` caps the tasks of the queue on all nodes together. den
// honours each as its writers do (see Global), so that it can share a queue
// with either kind of Perl node.
type Queue struct {
	ID     bson.ObjectID
	Name   string
	Plugin string
	// MaxThreads is the number of tasks of this queue one node may run at
	// once. A missing or null limit, and a nonsense one, count as 0.
	MaxThreads int
	// MaxThreadsProblem says why MaxThreads was forced to 0 when the stored
	// value was not a non-negative whole number; empty otherwise.
	MaxThreadsProblem string
	// Global is true when the limit came from `threads`: it then caps the
	// queue's running tasks across all nodes, not on each node.
	Global bool
	Sort   string
	// GFS is the queue's own output storage setting (true, false, auto), or
	// empty to use the node's.
	GFS string
	// CountTodo and CountTotal are nil when missing, null or not a number
	// (the node fills them in).
	CountTodo  *int64
	CountTotal *int64
	// BadCounts names the count fields that hold something other than a
	// number (a string, say): FillCounts recounts and rewrites them.
	BadCounts []string
	// Control holds the queue's defaults for its tasks' control settings.
	Control Control
	// Paused is set when the queue is paused (see pause.go): it then runs
	// nothing, MaxThreads is 0 whatever its limits say, and Paused keeps
	// the limits it resumes with.
	Paused *Pause
	// Retention is the queue's own retention (its retention field);
	// RetentionProblem says why it could not be read, and then Retention
	// is empty and the queue's tasks are kept (the queue is served all
	// the same).
	Retention        Retention
	RetentionProblem string
	// RateLimit is the queue's rate limit (rate_limit; nil: none): at
	// most so many of its tasks start in any such period on all den
	// nodes together (RateLimits). A rate_limit that cannot be read makes
	// the queue unusable: served without it, the queue would start its
	// tasks at any rate.
	RateLimit *RateLimit
	// Raw is the document as read, for settings den reads per task
	// (timeout, max_retries, ...): the fields den reads (queueFields)
	// when read by Queues, the whole document otherwise.
	Raw bson.Raw
	// pluginLater is set when the plugin came from plugin, later
	// Disbatch 4's spelling, not the protocol's constructor (ParamsField).
	pluginLater bool
}

// queueFields are the fields of a queue document that ParseQueue reads:
// what Queues reads of each queue. A field ParseQueue (or DecodeControl)
// comes to read must be listed here, or a node never sees it
// (TestQueuesReadOnlyWhatANodeUses).
var queueFields = append([]string{
	"_id", "name", "constructor", "plugin", "maxthreads", "threads", FieldPaused, "sort", "gfs",
	"count_todo", "count_total", FieldRetention, FieldRateLimit,
}, controlFields...)

// queueProjection projects a queue document on queueFields.
var queueProjection = func() bson.D {
	p := make(bson.D, 0, len(queueFields))
	for _, f := range queueFields {
		p = append(p, bson.E{Key: f, Value: 1})
	}
	return p
}()

// ParseQueue reads a queue document. It fails when the document cannot be
// used: no ObjectId _id, no plugin name, a gfs or a control setting
// (timeout, max_retries, ...) that cannot be read. A bad limit is reported
// in the Queue and replaced by 0; an unknown sort is the default order.
func ParseQueue(raw bson.Raw) (Queue, error) {
	q := Queue{Raw: raw}
	id, ok := raw.Lookup("_id").ObjectIDOK()
	if !ok {
		return q, fmt.Errorf("queue _id is %s, not an ObjectId", describe(raw.Lookup("_id")))
	}
	q.ID = id
	if name, ok := raw.Lookup("name").StringValueOK(); ok {
		q.Name = name
	}
	plugin := raw.Lookup("constructor")
	if plugin.Type == 0 || plugin.Type == bson.TypeNull {
		plugin = raw.Lookup("plugin")
		q.pluginLater = plugin.Type == bson.TypeString
	}
	q.Plugin, ok = plugin.StringValueOK()
	if !ok || strings.TrimSpace(q.Plugin) == "" {
		return q, fmt.Errorf("queue %s (%q) has no plugin: constructor is %s", id.Hex(), q.Name, describe(plugin))
	}

	limit := raw.Lookup("maxthreads")
	if limit.Type == 0 || limit.Type == bson.TypeNull {
		if alt := raw.Lookup("threads"); alt.Type != 0 {
			limit = alt
			q.Global = true
		}
	}
	switch n, ok := intValue(limit); {
	case limit.Type == 0 || limit.Type == bson.TypeNull:
		q.MaxThreads = 0
	case !ok || n < 0:
		q.MaxThreadsProblem = fmt.Sprintf("maxthreads is %s, not a non-negative whole number; treating it as 0", describe(limit))
	case n > 1<<20:
		q.MaxThreads = 1 << 20
	default:
		q.MaxThreads = int(n)
	}

	if q.Paused = parsePause(raw); q.Paused != nil {
		q.MaxThreads, q.MaxThreadsProblem = 0, ""
	}

	q.Sort = SortDefault
	if s, ok := raw.Lookup("sort").StringValueOK(); ok {
		switch strings.ToLower(s) {
		case SortFIFO, SortLIFO:
			q.Sort = strings.ToLower(s)
		}
	}
	if g := raw.Lookup("gfs"); !absent(g) {
		mode, err := ParseGFS(g)
		if err != nil {
			return q, fmt.Errorf("queue %s (%q): gfs: %w", id.Hex(), q.Name, err)
		}
		q.GFS = mode
	}
	for _, c := range []struct {
		field string
		to    **int64
	}{{"count_todo", &q.CountTodo}, {"count_total", &q.CountTotal}} {
		v := raw.Lookup(c.field)
		if absent(v) {
			continue
		}
		if n, ok := intValue(v); ok {
			*c.to = &n
			continue
		}
		q.BadCounts = append(q.BadCounts, c.field)
	}
	if r, err := DecodeRetention(raw.Lookup(FieldRetention)); err != nil {
		q.RetentionProblem = fmt.Sprintf("retention: %v", err)
	} else {
		q.Retention = r
	}
	var problems []string
	q.Control, problems = DecodeControl(raw)
	if l, err := DecodeRateLimit(raw.Lookup(FieldRateLimit)); err != nil {
		problems = append(problems, FieldRateLimit+" "+err.Error())
	} else {
		q.RateLimit = l
	}
	if len(problems) > 0 {
		return q, fmt.Errorf("queue %s (%q): %s", id.Hex(), q.Name, strings.Join(problems, "; "))
	}
	return q, nil
}

// Output storage modes (the `gfs` setting of Disbatch's config and queues).
const (
	GFSAlways = "true"  // always GridFS
	GFSNever  = "false" // in the task document (GridFS only when that is impossible)
	GFSAuto   = "auto"  // in the task document when it fits, else GridFS
)

// ErrBadGFS is returned for a gfs setting that is none of true, false, auto.
var ErrBadGFS = errors.New(`gfs must be true, false or "auto"`)

// ParseGFS reads a gfs setting as Disbatch writes it: a boolean (also 1/0 and
// the strings "true"/"false") or the string "auto".
func ParseGFS(v bson.RawValue) (string, error) {
	switch v.Type {
	case bson.TypeBoolean:
		if v.Boolean() {
			return GFSAlways, nil
		}
		return GFSNever, nil
	case bson.TypeString:
		return NormalizeGFS(v.StringValue())
	}
	if n, ok := intValue(v); ok && (n == 0 || n == 1) {
		if n == 1 {
			return GFSAlways, nil
		}
		return GFSNever, nil
	}
	return "", fmt.Errorf("%w, got %s", ErrBadGFS, describe(v))
}

// NormalizeGFS reads a gfs setting written as text.
func NormalizeGFS(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return GFSAlways, nil
	case "false", "0", "no":
		return GFSNever, nil
	case "auto", "":
		return GFSAuto, nil
	}
	return "", fmt.Errorf("%w, got %q", ErrBadGFS, s)
}
