package dentest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file is the corpus of hostile documents: what anyone with insert
// rights on tasks, queues or nodes can write. Every query den makes of
// those collections is tried against it (queue's
// TestEveryQueryReadsHostileDocuments, den's
// TestHostileDocumentsDoNotStallANode, and the command line's and web
// page's tests): every field den or the protocol reads, with a value of
// every BSON type; _ids of every type; huge and deeply nested values.

// Hostile is one document of the corpus: what it tries, and the document.
type Hostile struct {
	What string
	Doc  bson.D
}

// Value is a value of one BSON type, named.
type Value struct {
	Name string
	V    any
}

// Values returns a value of every BSON type, and the odd values of some
// (NaN, infinities, extremes, empty), each named. ref is an ObjectId the
// caller cares about (a queue's _id): an array holding it is among the
// values, since a query's equality on a field matches an array that holds
// the value.
func Values(ref bson.ObjectID) []Value {
	nan, _ := bson.ParseDecimal128("NaN")
	dec, _ := bson.ParseDecimal128("1.5")
	return []Value{
		{"double", 1.5},
		{"double NaN", math.NaN()},
		{"double +Inf", math.Inf(1)},
		{"double -1", -1.0},
		{"string", "x"},
		{"empty string", ""},
		{"string with controls", "\x1b[2J\x1b]0;pwned\x07\u202e"},
		{"string not UTF-8", "bad \xff\xfe utf-8"},
		{"document", bson.D{{Key: "a", Value: 1}}},
		{"empty document", bson.D{}},
		{"array", bson.A{int32(1), "a"}},
		{"empty array", bson.A{}},
		{"array holding the id", bson.A{ref}},
		{"array holding the id twice", bson.A{ref, ref}},
		{"binary", bson.Binary{Subtype: 0, Data: []byte{0, 1, 2}}},
		{"uuid", bson.Binary{Subtype: 4, Data: make([]byte, 16)}},
		{"undefined", bson.Undefined{}},
		{"objectId", bson.NewObjectID()},
		{"bool true", true},
		{"bool false", false},
		{"date epoch", bson.DateTime(0)},
		{"date year 9999", bson.NewDateTimeFromTime(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))},
		{"date before 1970", bson.DateTime(-62135596800000)},
		{"null", nil},
		{"regex", bson.Regex{Pattern: ".*", Options: "i"}},
		{"dbpointer", bson.DBPointer{DB: "tasks", Pointer: ref}},
		{"javascript", bson.JavaScript("function(){}")},
		{"symbol", bson.Symbol("s")},
		{"code with scope", bson.CodeWithScope{Code: "x", Scope: bson.D{{Key: "x", Value: 1}}}},
		{"int32 -1", int32(-1)},
		{"int32 max", int32(math.MaxInt32)},
		{"int32 min", int32(math.MinInt32)},
		{"timestamp", bson.Timestamp{T: 1, I: 1}},
		{"int64 max", int64(math.MaxInt64)},
		{"int64 min", int64(math.MinInt64)},
		{"decimal128", dec},
		{"decimal128 NaN", nan},
		{"minKey", bson.MinKey{}},
		{"maxKey", bson.MaxKey{}},
	}
}

// TaskFields are the fields of a task document that the protocol or den
// reads, dotted where den reads a field inside another. The corpus sets
// each to every value of Values.
var TaskFields = []string{
	"queue", "status", "node", "parameters", "params", "ctime", "mtime", "stdout", "stderr",
	"runner", "runner.token", "runner.pid", "runner.started", "runner.host", "runner.at", "runner.beat",
	"cancel", "timeout", "max_retries", "retry_delay", "max_termination_time", "max_output",
	"start_after", "end_before", "expired", "max_timeouts", "timeouts", "attempts", "history",
	"after", "waiting", "after_was", "has_dependents", "live_until", "live", "outcome", "outcome_reason",
	"memory_retry_factor", "requested_resources", "requested_resources.memory_mb", "requested_resources.cpus",
	"unfit", "usage", "usage_interval", "exit_code", "signal", "timed_out", "orphan_reason", "leftover_processes", "max_processes",
	"unique_key", "unique_for", "unique_until",
}

// QueueFields are the fields of a queue document that the protocol or den
// reads.
var QueueFields = []string{
	"name", "constructor", "plugin", "maxthreads", "threads", "sort", "gfs", "count_todo", "count_total",
	"timeout", "max_retries", "retry_delay", "max_termination_time", "max_output", "max_timeouts",
	"usage_interval", "requested_resources", "requested_resources.memory_mb", "requested_resources.cpus",
	"memory_retry_factor", "max_processes", "rate_limit", "rate_limit.starts", "rate_limit.per",
}

// NodeFields are the fields of a node document that den reads.
var NodeFields = []string{
	"node", "timestamp", "queues", "maxthreads", "version", "pid", "started",
	"resources", "resources.offer", "resources.offer.memory_mb", "resources.offer.cpus", "resources.load",
}

// ScheduleFields are the fields of a schedule document den reads.
var ScheduleFields = []string{
	"queue", "parameters", "task", "task.timeout", "cron", "tz", "every", "missed", "overlap", "paused", "next",
	"last", "last.at", "last.task", "last_task", "problem",
}

// with returns doc with field (dotted: inside a sub-document, made where
// missing or not a document) set to v.
func with(doc bson.D, field string, v any) bson.D {
	out := make(bson.D, 0, len(doc)+1)
	head, rest, nested := strings.Cut(field, ".")
	set := false
	for _, e := range doc {
		if e.Key != head {
			out = append(out, e)
			continue
		}
		set = true
		if !nested {
			out = append(out, bson.E{Key: head, Value: v})
			continue
		}
		sub, _ := e.Value.(bson.D)
		out = append(out, bson.E{Key: head, Value: with(sub, rest, v)})
	}
	if !set {
		if nested {
			v = with(nil, rest, v)
		}
		out = append(out, bson.E{Key: head, Value: v})
	}
	return out
}

// Deep returns a document nested depth levels deep.
func Deep(depth int) bson.D {
	d := bson.D{{Key: "leaf", Value: 1}}
	for range depth - 1 {
		d = bson.D{{Key: "a", Value: d}}
	}
	return d
}

// HugeString is a string of n bytes.
func HugeString(n int) string { return strings.Repeat("x", n) }

// HostileTasks returns the corpus of task documents for queue qid: from a
// valid queued task (parameters params), one document per field of
// TaskFields and value of Values with that field set to that value; one per
// value as _id; and huge, deep and wide documents. Every one is queued
// (-2) and unclaimed, or tries to be, so that claims meet it; so that the
// queries of running tasks meet them too, those with a field about the
// run come again as running (0) on node, and as claimed (-1) by node.
func HostileTasks(qid bson.ObjectID, node string, params bson.D) []Hostile {
	now := time.Now()
	base := func() bson.D {
		return bson.D{
			{Key: "_id", Value: bson.NewObjectID()}, {Key: "queue", Value: qid}, {Key: "status", Value: int32(-2)},
			{Key: "node", Value: int32(-1)}, {Key: "parameters", Value: params}, {Key: "ctime", Value: now},
			{Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
		}
	}
	out := variants("task", base, TaskFields, qid)
	// The same fields on tasks a node holds: what rescues, cancellation
	// and the counts of running tasks read.
	for _, st := range []int32{-1, 0} {
		for _, f := range []string{"queue", "node", "runner", "runner.token", "runner.pid", "runner.started", "runner.beat", "mtime", "cancel", "timeout", "end_before", "usage", "live_until", "attempts", "max_retries"} {
			for _, v := range sample(Values(qid)) {
				doc := with(with(with(base(), "status", st), "node", node), "runner",
					bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "pid", Value: int32(1)}, {Key: "started", Value: int64(1)}, {Key: "host", Value: "elsewhere"}})
				out = append(out, Hostile{fmt.Sprintf("task status %d %s %s", st, f, v.Name), with(doc, f, v.V)})
			}
		}
	}
	out = append(out,
		Hostile{"task with 4 MiB parameters", with(base(), "parameters", bson.D{{Key: "ms", Value: 0}, {Key: "blob", Value: HugeString(4 << 20)}})},
		Hostile{"task with 1 MiB stderr", with(base(), "stderr", HugeString(1<<20))},
		Hostile{"task with parameters 95 deep", with(base(), "parameters", Deep(95))},
		Hostile{"task with requested_resources 95 deep", with(base(), "requested_resources", Deep(95))},
		Hostile{"task with runner 95 deep", with(with(with(base(), "status", int32(0)), "node", node), "runner", Deep(95))},
		Hostile{"task with 10000 fields", wide(base(), 10000)},
		Hostile{"task with a history of 5000 entries", with(base(), "history", manyEntries(5000))},
	)
	return out
}

// HostileQueues returns the corpus of queue documents: from a valid queue
// for plugin, one per field of QueueFields and value of Values, one per
// value as _id, and huge, deep and wide documents. Each is named
// "hostile-N" unless its name is what it tries.
func HostileQueues(plugin string) []Hostile {
	n := 0
	base := func() bson.D {
		n++
		return bson.D{
			{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: fmt.Sprintf("hostile-%d", n)},
			{Key: "constructor", Value: plugin}, {Key: "maxthreads", Value: int32(1)}, {Key: "sort", Value: "fifo"},
			{Key: "count_todo", Value: int64(0)}, {Key: "count_total", Value: int64(0)},
		}
	}
	out := variants("queue", base, QueueFields, bson.NewObjectID())
	out = append(out,
		Hostile{"queue with a 4 MiB name", with(base(), "name", HugeString(4<<20))},
		Hostile{"queue with a 4 MiB field", with(base(), "junk", HugeString(4<<20))},
		Hostile{"queue 95 deep", with(base(), "junk", Deep(95))},
		Hostile{"queue with 10000 fields", wide(base(), 10000)},
	)
	return out
}

// HostileSchedules returns the corpus of schedule documents: from a valid
// schedule of queue (every second, due now), one per field of
// ScheduleFields and value of Values, one per value as _id, and huge and
// deep ones.
func HostileSchedules(queue bson.ObjectID) []Hostile {
	n := 0
	base := func() bson.D {
		n++
		return bson.D{
			{Key: "_id", Value: fmt.Sprintf("hostile-schedule-%d", n)}, {Key: "queue", Value: queue},
			{Key: "parameters", Value: bson.D{}}, {Key: "every", Value: 1.0}, {Key: "missed", Value: "skip"}, {Key: "overlap", Value: "allow"},
			{Key: "paused", Value: false}, {Key: "next", Value: time.Now().Add(-time.Second)},
		}
	}
	out := variants("schedule", base, ScheduleFields, queue)
	out = append(out,
		Hostile{"schedule with 4 MiB parameters", with(base(), "parameters", bson.D{{Key: "x", Value: HugeString(4 << 20)}})},
		Hostile{"schedule 95 deep", with(base(), "task", Deep(95))},
	)
	return out
}

// HostileNodes returns the corpus of node documents: from a valid node
// document, one per field of NodeFields and value of Values, one per value
// as _id, and huge and deep ones.
func HostileNodes() []Hostile {
	n := 0
	base := func() bson.D {
		n++
		return bson.D{
			{Key: "_id", Value: bson.NewObjectID()}, {Key: "node", Value: fmt.Sprintf("hostile-node-%d", n)},
			{Key: "timestamp", Value: time.Now()}, {Key: "queues", Value: bson.A{}},
		}
	}
	ref := bson.NewObjectID()
	out := variants("node", base, NodeFields, ref)
	for _, v := range Values(ref) {
		out = append(out, Hostile{"node queues entry " + v.Name, with(base(), "queues", bson.A{v.V})})
	}
	out = append(out,
		Hostile{"node with 4 MiB queues", with(base(), "queues", bson.A{bson.D{{Key: "name", Value: HugeString(4 << 20)}}})},
		Hostile{"node 95 deep", with(base(), "resources", Deep(95))},
	)
	return out
}

// variants is the part of a corpus every collection has: from valid
// documents (base, whose first field is _id), one per value of Values(ref)
// as _id, and one per field of fields and value of Values(ref), each named
// "kind field value".
func variants(kind string, base func() bson.D, fields []string, ref bson.ObjectID) []Hostile {
	var out []Hostile
	for _, v := range Values(ref) {
		doc := base()
		doc[0].Value = v.V
		out = append(out, Hostile{kind + " _id " + v.Name, doc})
	}
	for _, f := range fields {
		for _, v := range Values(ref) {
			out = append(out, Hostile{fmt.Sprintf("%s %s %s", kind, f, v.Name), with(base(), f, v.V)})
		}
	}
	return out
}

// sample is a few of values, one of each kind a decoder must refuse: for
// the fields repeated on held tasks, where every value would make the
// corpus too slow for the development server to scan.
func sample(values []Value) []Value {
	var out []Value
	for _, v := range values {
		switch v.Name {
		case "string with controls", "document", "empty array", "array holding the id", "null", "bool true", "int64 min", "date year 9999", "double NaN", "minKey":
			out = append(out, v)
		}
	}
	return out
}

func wide(doc bson.D, fields int) bson.D {
	for i := range fields {
		doc = append(doc, bson.E{Key: fmt.Sprintf("f%d", i), Value: int32(i)})
	}
	return doc
}

func manyEntries(n int) bson.A {
	a := make(bson.A, n)
	for i := range a {
		a[i] = bson.D{{Key: "attempt", Value: "x"}, {Key: "status", Value: bson.D{}}}
	}
	return a
}

// InsertHostile inserts the documents of the corpus into coll and returns
// those that landed. A document the server refuses (MongoDB refuses an
// array or regex _id; FerretDB, the development server, refuses Decimal128,
// MinKey, MaxKey, Undefined and the JavaScript types, and drops the
// connection for them) or does not store as written (FerretDB replaces the
// bytes of a string that is not UTF-8) is left out: no writer can store
// it either. The
// values the server refuses are found once per test binary (Storable), so
// that the corpus goes in with a few unordered inserts rather than one
// command per document.
func InsertHostile(t testing.TB, coll *mongo.Collection, docs []Hostile) []Hostile {
	t.Helper()
	ctx := Context(t)
	refused := refusedValues(t)
	var candidates []Hostile
	for _, h := range docs {
		raw, err := bson.Marshal(h.Doc)
		if err != nil {
			t.Fatalf("dentest: marshal %s: %v", h.What, err)
		}
		if !holds(bson.Raw(raw), refused) {
			candidates = append(candidates, h)
		}
	}
	landed := make([]Hostile, 0, len(candidates))
	const batch = 500
	for start := 0; start < len(candidates); start += batch {
		part := candidates[start:min(start+batch, len(candidates))]
		many := make([]any, len(part))
		for i, h := range part {
			many[i] = h.Doc
		}
		_, err := coll.InsertMany(ctx, many, options.InsertMany().SetOrdered(false))
		failed := map[int]bool{}
		var bwe mongo.BulkWriteException
		switch {
		case err == nil:
		case errors.As(err, &bwe) && bwe.WriteConcernError == nil:
			for _, we := range bwe.WriteErrors {
				failed[we.Index] = true
			}
		default:
			t.Fatalf("dentest: insert hostile documents into %s: %v", coll.Name(), err)
		}
		for i, h := range part {
			if !failed[i] {
				landed = append(landed, h)
			}
		}
	}
	var names []string
	for _, name := range refused {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	t.Logf("dentest: %d of %d hostile documents landed in %s; the server refuses these values: %s", len(landed), len(docs), coll.Name(), strings.Join(names, ", "))
	if len(landed) < len(docs)/2 {
		t.Fatalf("dentest: only %d of %d hostile documents landed in %s: the corpus tests nothing", len(landed), len(docs), coll.Name())
	}
	return landed
}

// rawKey identifies a value by its type and bytes; typeKey a type.
func rawKey(v bson.RawValue) string { return "v" + string(rune(v.Type)) + string(v.Value) }

func typeKey(t bson.Type) string { return "t" + string(rune(t)) }

// holds reports whether doc holds, at any depth, one of the values keyed
// (rawKey) in values.
func holds(doc bson.Raw, values map[string]string) bool {
	elems, _ := doc.Elements()
	for _, e := range elems {
		v := e.Value()
		if _, ok := values[rawKey(v)]; ok {
			return true
		}
		if _, ok := values[typeKey(v.Type)]; ok {
			return true
		}
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			if holds(v.Document(), values) {
				return true
			}
		case bson.TypeArray:
			if holds(bson.Raw(v.Array()), values) {
				return true
			}
		case bson.TypeCodeWithScope:
			if _, scope := v.CodeWithScope(); holds(scope, values) {
				return true
			}
		}
	}
	return false
}

// Storable reports whether the server stores v (in a field; MongoDB
// refuses more as an _id, which InsertHostile finds out document by
// document).
func Storable(t testing.TB, v any) bool {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		t.Fatalf("dentest: marshal %v: %v", v, err)
	}
	return !holds(bson.Raw(raw), refusedValues(t))
}

var refused struct {
	once   sync.Once
	values map[string]string
	err    error
}

// refusedValues finds, once per test binary, which of Values the server
// refuses: keyed by rawKey, and by typeKey where it refuses every value of
// a type. The development server drops the connection on such a value,
// which clears the pool of the client that sent it and fails every other
// operation in flight on it: the probe has a client of its own.
func refusedValues(t testing.TB) map[string]string {
	t.Helper()
	refused.once.Do(func() { refused.values, refused.err = probeValues() })
	if refused.err != nil {
		t.Fatalf("dentest: find the values the server refuses: %v", refused.err)
	}
	return refused.values
}

func probeValues() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(URI()))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	db := c.Database(dbName("value_probe"))
	defer func() { _ = db.Drop(context.Background()) }()
	out := map[string]string{}
	accepted := map[bson.Type]bool{}
	for _, v := range Values(bson.NewObjectID()) {
		raw, err := bson.Marshal(bson.D{{Key: "v", Value: v.V}})
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", v.Name, err)
		}
		rv := bson.Raw(raw).Lookup("v")
		res, err := db.Collection("probe").InsertOne(ctx, bson.D{{Key: "v", Value: v.V}})
		if err == nil {
			// Stored as written? The development server stores a string
			// that is not UTF-8 with its bytes replaced, and then cannot
			// update the document by that _id: no writer can make such a
			// document there.
			var back bson.Raw
			if back, err = db.Collection("probe").FindOne(ctx, bson.D{{Key: "_id", Value: res.InsertedID}}).Raw(); err == nil {
				if got := back.Lookup("v"); got.Type != rv.Type || string(got.Value) != string(rv.Value) && rv.Type != bson.TypeDouble {
					err = fmt.Errorf("stored as %s", got)
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			out[rawKey(rv)] = v.Name
			if !accepted[rv.Type] {
				out[typeKey(rv.Type)] = v.Name
			}
			continue
		}
		accepted[rv.Type] = true
		delete(out, typeKey(rv.Type))
	}
	return out, nil
}
