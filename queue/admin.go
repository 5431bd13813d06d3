package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/gridfs"
)

// This file holds the queries of the operator's command line (den queue,
// den task, den node, den counts): what people do to the database by hand,
// done the way the protocol and the nodes expect.

// Queue settings an operator may set, by the name they have in the queue
// document (den queue create and den queue set take the same names).
const (
	SettingName       = "name"
	SettingPlugin     = "constructor" // the protocol's name for the plugin
	SettingMaxThreads = "maxthreads"  // per node, as the protocol means it
	SettingThreads    = "threads"     // on all nodes together, as later Disbatch means it
	SettingSort       = "sort"
	SettingGFS        = "gfs"
)

// QueueSettingKeys lists every key den queue set accepts, in the order
// help texts show them.
var QueueSettingKeys = []string{SettingName, SettingPlugin, SettingMaxThreads, SettingThreads, SettingSort, SettingGFS,
	FieldTimeout, FieldMaxRetries, FieldMaxTimeouts, FieldRetryDelay, FieldMaxTermination, FieldMaxOutput,
	FieldMaxProcesses, FieldUsageInterval, FieldMemoryRetryFactor, FieldRetention,
	FieldRetention + "." + RetainSucceeded, FieldRetention + "." + RetainFailed, FieldRetention + "." + RetainCancelled,
	FieldRetention + "." + RetainOrphaned, FieldRetention + ".action", FieldRetention + ".reports"}

// QueueSettings are values to write into a queue document, each already
// checked and in the form den writes it. Unset lists keys to remove.
type QueueSettings struct {
	Set   bson.D
	Unset []string
}

// ParseQueueSetting checks one setting given as text (key=value on the
// command line) with the decoder the nodes read it with, and adds it to s.
// The value "none" (or an empty value) removes the key, except for the name
// and the plugin, which a queue must have.
func (s *QueueSettings) ParseQueueSetting(key, value string) error {
	key = strings.ToLower(strings.TrimSpace(key))
	if key == "plugin" {
		key = SettingPlugin
	}
	if !slices.Contains(QueueSettingKeys, key) {
		return fmt.Errorf("unknown queue setting %q (known: %s)", key, strings.Join(QueueSettingKeys, ", "))
	}
	value = strings.TrimSpace(value)
	if value == "" || strings.EqualFold(value, "none") || strings.EqualFold(value, "null") {
		if key == SettingName || key == SettingPlugin {
			return fmt.Errorf("a queue must have a %s", key)
		}
		s.Unset = append(s.Unset, key)
		return nil
	}
	text := textValue(value)
	var v any
	switch key {
	case SettingName, SettingPlugin:
		v = value
	case SettingMaxThreads, SettingThreads:
		n, err := DecodeCount(text)
		if err != nil || n > 1<<20 {
			return fmt.Errorf("%s %q: want a whole number from 0 to %d", key, value, 1<<20)
		}
		v = int32(n)
	case SettingSort:
		lower := strings.ToLower(value)
		if lower != SortFIFO && lower != SortLIFO && lower != SortDefault {
			return fmt.Errorf("sort %q: want fifo, lifo or default", value)
		}
		v = lower
	case SettingGFS:
		mode, err := NormalizeGFS(value)
		if err != nil {
			return fmt.Errorf("gfs: %w", err)
		}
		v = mode
	case FieldTimeout, FieldRetryDelay, FieldMaxTermination, FieldUsageInterval:
		d, err := DecodeSeconds(text)
		if err != nil {
			return fmt.Errorf("%s %s", key, err)
		}
		v = seconds(d)
	case FieldMaxRetries, FieldMaxTimeouts:
		n, err := DecodeCount(text)
		if err != nil || n > 1000 {
			return fmt.Errorf("%s %q: want a whole number from 0 to 1000", key, value)
		}
		v = int32(n)
	case FieldMaxOutput:
		n, err := DecodeCount(text)
		if err != nil || n == 0 {
			return fmt.Errorf("%s %q: want a positive number of bytes", key, value)
		}
		v = n
	case FieldMaxProcesses:
		n, err := DecodeCount(text)
		if err != nil || n == 0 || n > math.MaxInt32 {
			return fmt.Errorf("%s %q: want a positive number of processes", key, value)
		}
		v = n
	case FieldMemoryRetryFactor:
		f, err := DecodeMemoryRetryFactor(text)
		if err != nil {
			return fmt.Errorf("%s %s", key, err)
		}
		v = f
	case FieldRetention:
		return fmt.Errorf("retention is set key by key (retention.succeeded=7d, retention.action=archive, ...) or removed whole (retention=none)")
	default: // retention.*
		var err error
		if v, err = parseRetentionSetting(strings.TrimPrefix(key, FieldRetention+"."), value); err != nil {
			return err
		}
	}
	s.Set = append(s.Set, bson.E{Key: key, Value: v})
	return nil
}

// textValue is s as the BSON string a writer would store.
func textValue(s string) bson.RawValue {
	_, raw, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: bson.TypeString, Value: raw}
}

// seconds is d as a number of seconds: whole when it is.
func seconds(d time.Duration) any {
	if d%time.Second == 0 {
		return int64(d / time.Second)
	}
	return d.Seconds()
}

func (s *QueueSettings) has(key string) bool {
	for _, e := range s.Set {
		if e.Key == key {
			return true
		}
	}
	return false
}

// ErrNoQueue is returned when no queue has the name or id given.
var ErrNoQueue = errors.New("no such queue")

// ErrQueueExists is returned when a queue of the name given exists.
var ErrQueueExists = errors.New("a queue of that name exists")

// FindQueue returns the queue whose _id (as hex) or name is ref. The
// document is returned even when it cannot be used (problem says why), so
// that an operator can fix or delete it. Two queues of that name are an
// error naming their ids.
func (s *OperatorStore) FindQueue(ctx context.Context, ref string) (q Queue, problem, err error) {
	filter := bson.D{{Key: "name", Value: ref}}
	if id, err := bson.ObjectIDFromHex(ref); err == nil {
		filter = bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "name", Value: ref}}}}}
	}
	cur, err := s.queues.Find(ctx, filter, options.Find().SetLimit(3))
	if err != nil {
		return q, nil, fmt.Errorf("find queue %q: %w", ref, err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return q, nil, fmt.Errorf("find queue %q: %w", ref, err)
	}
	switch len(docs) {
	case 0:
		return q, nil, fmt.Errorf("%w %q", ErrNoQueue, ref)
	case 1:
	default:
		var ids []string
		for _, d := range docs {
			ids = append(ids, d.Lookup("_id").String())
		}
		return q, nil, fmt.Errorf("%d queues match %q (%s): give the id", len(docs), ref, strings.Join(ids, ", "))
	}
	q, problem = ParseQueue(docs[0])
	if q.ID.IsZero() {
		return q, nil, fmt.Errorf("queue %q: %w", ref, problem)
	}
	return q, problem, nil
}

// CreateQueueWith inserts a queue document with the given settings (name
// and plugin required; one of maxthreads or threads) and both counts at
// zero. A second queue of the same name is refused.
func (s *OperatorStore) CreateQueueWith(ctx context.Context, settings QueueSettings) (bson.ObjectID, error) {
	var id bson.ObjectID
	var name string
	for _, e := range settings.Set {
		if e.Key == SettingName {
			name, _ = e.Value.(string)
		}
	}
	switch {
	case name == "":
		return id, errors.New("a queue needs a name")
	case !settings.has(SettingPlugin) && !settings.has(SettingPluginLater):
		return id, errors.New("a queue needs a plugin (constructor)")
	case settings.has(SettingMaxThreads) && settings.has(SettingThreads):
		return id, errors.New("give maxthreads (per node) or threads (on all nodes together), not both")
	}
	n, err := s.queues.CountDocuments(ctx, bson.D{{Key: "name", Value: name}})
	if err != nil {
		return id, fmt.Errorf("create queue %q: %w", name, err)
	}
	if n > 0 {
		return id, fmt.Errorf("create queue %q: %w", name, ErrQueueExists)
	}
	id = bson.NewObjectID()
	doc := append(bson.D{{Key: "_id", Value: id}}, settings.Set...)
	doc = append(doc, bson.E{Key: "count_todo", Value: int64(0)}, bson.E{Key: "count_total", Value: int64(0)})
	if _, err := s.queues.InsertOne(ctx, doc); err != nil {
		return id, fmt.Errorf("create queue %q: %w", name, err)
	}
	return id, nil
}

// UpdateQueue writes settings into a queue document. Setting maxthreads
// removes threads and the other way round, so that the queue has the one
// limit the operator asked for. On a paused queue the limits go into what
// it keeps for its resume (paused.maxthreads, paused.threads): it stays
// paused, and resumes with them.
func (s *OperatorStore) UpdateQueue(ctx context.Context, id bson.ObjectID, settings QueueSettings) error {
	_, err := s.UpdateQueueResult(ctx, id, settings)
	return err
}

// UpdateQueueResult is UpdateQueue, and says what the update matched and
// changed (the Disbatch web API answers with both). A plugin given as
// SettingPluginLater is written as plugin, and constructor (which would
// shadow it) removed.
func (s *OperatorStore) UpdateQueueResult(ctx context.Context, id bson.ObjectID, settings QueueSettings) (UpdateResult, error) {
	if settings.has(SettingMaxThreads) && settings.has(SettingThreads) {
		return UpdateResult{}, errors.New("give maxthreads (per node) or threads (on all nodes together), not both")
	}
	unset := slices.Clone(settings.Unset)
	if settings.has(SettingMaxThreads) {
		unset = append(unset, SettingThreads)
	}
	if settings.has(SettingThreads) {
		unset = append(unset, SettingMaxThreads)
	}
	if settings.has(SettingPlugin) {
		unset = append(unset, SettingPluginLater) // later Disbatch's spelling, which constructor would shadow
	}
	if settings.has(SettingPluginLater) {
		unset = append(unset, SettingPlugin)
	}
	limits := false
	// build is the update, with the limits renamed by limit.
	build := func(limit func(string) string) bson.D {
		name := func(k string) string {
			if k == SettingMaxThreads || k == SettingThreads {
				limits = true
				return limit(k)
			}
			return k
		}
		update := bson.D{}
		if len(settings.Set) > 0 {
			set := bson.D{}
			for _, e := range settings.Set {
				set = append(set, bson.E{Key: name(e.Key), Value: e.Value})
			}
			update = append(update, bson.E{Key: "$set", Value: set})
		}
		if len(unset) > 0 {
			u := bson.D{}
			for _, k := range unset {
				u = append(u, bson.E{Key: name(k), Value: ""})
			}
			update = append(update, bson.E{Key: "$unset", Value: u})
		}
		return update
	}
	update := build(func(k string) string { return k })
	if len(update) == 0 {
		return UpdateResult{}, errors.New("nothing to set")
	}
	if name, ok := settingString(settings, SettingName); ok {
		n, err := s.queues.CountDocuments(ctx, bson.D{{Key: "name", Value: name}, {Key: "_id", Value: bson.D{{Key: "$ne", Value: id}}}})
		if err != nil {
			return UpdateResult{}, fmt.Errorf("update queue %s: %w", id.Hex(), err)
		}
		if n > 0 {
			return UpdateResult{}, fmt.Errorf("update queue %s: another queue is named %q", id.Hex(), name)
		}
	}
	filter := bson.D{{Key: "_id", Value: id}}
	if limits {
		filter = append(filter, bson.E{Key: FieldPaused, Value: nil})
	}
	res, err := s.queues.UpdateOne(ctx, filter, update)
	if err != nil {
		return UpdateResult{}, fmt.Errorf("update queue %s: %w", id.Hex(), err)
	}
	if res.MatchedCount == 0 && limits {
		// Paused (the filter's null also matches a paused: null, which
		// is no pause): its limits are those it keeps.
		filter = bson.D{{Key: "_id", Value: id}, {Key: FieldPaused, Value: bson.D{{Key: "$ne", Value: nil}}}}
		if res, err = s.queues.UpdateOne(ctx, filter, build(keptLimit)); err != nil {
			return UpdateResult{}, fmt.Errorf("update queue %s: %w", id.Hex(), err)
		}
	}
	if res.MatchedCount == 0 {
		return UpdateResult{}, fmt.Errorf("update queue %s: %w", id.Hex(), ErrNoQueue)
	}
	return UpdateResult{Matched: res.MatchedCount, Modified: res.ModifiedCount}, nil
}

func settingString(s QueueSettings, key string) (string, bool) {
	for _, e := range s.Set {
		if e.Key == key {
			v, ok := e.Value.(string)
			return v, ok
		}
	}
	return "", false
}

// DeleteQueue removes a queue document. Its tasks stay (with their output
// and history), as Disbatch's own deleteQueue leaves them.
func (s *OperatorStore) DeleteQueue(ctx context.Context, id bson.ObjectID) error {
	res, err := s.queues.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", id.Hex(), err)
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("delete queue %s: %w", id.Hex(), ErrNoQueue)
	}
	return nil
}

// StatusCounts counts a queue's tasks by status. Other counts the tasks
// whose status is not a whole number.
type StatusCounts struct {
	ByStatus map[int]int64
	Other    int64
}

// Total is the number of tasks: what count_total should be.
func (c StatusCounts) Total() int64 {
	n := c.Other
	for _, v := range c.ByStatus {
		n += v
	}
	return n
}

// Todo is the number of tasks with a status of 0 or less: what count_todo
// should be. Nodes take a task off count_todo only when it finishes with a
// positive status, so cancelled (-5) and orphaned (-6) tasks stay counted.
func (c StatusCounts) Todo() int64 {
	var n int64
	for st, v := range c.ByStatus {
		if st <= 0 {
			n += v
		}
	}
	return n
}

// Group adds up the tasks of one StatusGroup.
func (c StatusCounts) Group(g string) int64 {
	var n int64
	for st, v := range c.ByStatus {
		if StatusGroup(st) == g {
			n += v
		}
	}
	return n
}

// Status groups, for summaries.
const (
	GroupTodo      = "todo"      // queued, or held back (-2, -3, -4)
	GroupRunning   = "running"   // claimed or running (-1, 0)
	GroupDone      = "done"      // succeeded (1)
	GroupFailed    = "failed"    // failed (2 and up) or orphaned (-6)
	GroupCancelled = "cancelled" // -5
)

// StatusGroup tells which summary group a status belongs to.
func StatusGroup(status int) string {
	switch {
	case status == StatusClaimed || status == StatusRunning:
		return GroupRunning
	case status == StatusSucceeded:
		return GroupDone
	case status > StatusSucceeded || status == StatusOrphaned:
		return GroupFailed
	case status == StatusCancelled:
		return GroupCancelled
	}
	return GroupTodo
}

// Finished reports whether a task with this status is no longer counted
// in its queue's count_todo (the runner took it off when it finished).
func Finished(status int) bool { return status >= StatusSucceeded }

// TaskCounts counts every queue's tasks by status (only the tasks of the
// queues in only, when it names any), in one aggregation.
//
// The grouping is on plain fields: FerretDB (the embedded development
// server) does not implement $cond inside $group.
func (s *conn) TaskCounts(ctx context.Context, only ...bson.ObjectID) (map[bson.ObjectID]StatusCounts, error) {
	var pipeline bson.A
	if len(only) > 0 {
		// The queues' tasks only, found by the {queue, status} index.
		pipeline = append(pipeline, bson.D{{Key: "$match", Value: bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: only}}}}}})
	}
	cur, err := s.tasks.Aggregate(ctx, append(pipeline,
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "status", Value: "$status"}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	))
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	defer cur.Close(ctx)
	out := map[bson.ObjectID]StatusCounts{}
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		qid, ok := id.Document().Lookup("queue").ObjectIDOK()
		if !ok {
			continue // a task without a queue id belongs to no queue
		}
		n, _ := intValue(cur.Current.Lookup("n"))
		c, ok := out[qid]
		if !ok {
			c = StatusCounts{ByStatus: map[int]int64{}}
		}
		if st, ok := intValue(id.Document().Lookup("status")); ok && st >= math.MinInt32 && st <= math.MaxInt32 {
			c.ByStatus[int(st)] += n
		} else {
			c.Other += n
		}
		out[qid] = c
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	return out, nil
}

// InsertOptions are what InsertTasks gives every task it inserts besides
// its parameters.
type InsertOptions struct {
	// After lists the tasks they come after (FieldAfter); Waiting those
	// of them not yet succeeded. With Waiting, the tasks are inserted
	// blocked (-4) and registered; with only After, queued and registered.
	After, Waiting []bson.ObjectID
	// Params writes the parameters as params, the spelling Disbatch 4's
	// web API writes and its nodes read, instead of the protocol's
	// parameters (den nodes read both).
	Params bool
}

// InsertTasks inserts one queued task per parameters document into a
// queue, in one command, and raises the queue's count_todo and count_total
// by exactly the number inserted. It returns the ids of the tasks it
// inserted; when the insert fails part way, the error, and the ids of
// those that did land (counted).
func (s *OperatorStore) InsertTasks(ctx context.Context, queueID bson.ObjectID, params []bson.Raw, now time.Time, opts InsertOptions) ([]bson.ObjectID, error) {
	if len(params) == 0 {
		return nil, nil
	}
	status := StatusQueued
	if len(opts.Waiting) > 0 {
		status = StatusBlocked
	}
	paramsField := "parameters"
	if opts.Params {
		paramsField = "params"
	}
	docs := make([]any, len(params))
	ids := make([]bson.ObjectID, len(params))
	for i, p := range params {
		ids[i] = bson.NewObjectID()
		doc := bson.D{
			{Key: "_id", Value: ids[i]}, {Key: "queue", Value: queueID},
			{Key: "status", Value: status}, {Key: "node", Value: Unclaimed},
			{Key: paramsField, Value: p}, {Key: "ctime", Value: now}, {Key: "mtime", Value: now},
			{Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
		}
		if len(opts.After) > 0 {
			waiting := opts.Waiting
			if waiting == nil {
				waiting = []bson.ObjectID{}
			}
			doc = append(doc, bson.E{Key: FieldAfter, Value: opts.After}, bson.E{Key: FieldAfterWas, Value: opts.After},
				bson.E{Key: FieldWaiting, Value: waiting})
		}
		docs[i] = doc
	}
	landed := ids
	_, insertErr := s.tasks.InsertMany(ctx, docs)
	if insertErr != nil {
		// What landed is not known from the error (a network failure says
		// nothing): ask.
		found, err := (*conn)(s).Statuses(context.WithoutCancel(ctx), ids)
		if err != nil {
			return nil, fmt.Errorf("insert tasks: %w (and finding what was inserted: %v; run den counts fix)", insertErr, err)
		}
		landed = nil
		for _, id := range ids {
			if _, ok := found[id]; ok {
				landed = append(landed, id)
			}
		}
	}
	if inserted := int64(len(landed)); inserted > 0 {
		_, err := s.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: queueID}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: inserted}, {Key: "count_total", Value: inserted}}}})
		if err != nil {
			return landed, fmt.Errorf("raise the counts of queue %s by %d: %w (run den counts fix)", queueID.Hex(), inserted, err)
		}
	}
	if insertErr != nil {
		return landed, fmt.Errorf("insert tasks: %w", insertErr)
	}
	return landed, nil
}

// TaskFilter selects tasks for ListTasks and RetryMatching. Zero fields
// select everything.
type TaskFilter struct {
	Queues   []bson.ObjectID
	Statuses []int
	Node     string
	// Outcomes selects tasks whose last run ended with one of these
	// outcomes (see Outcome).
	Outcomes []string
	// Since selects tasks created at or after it (their _id's time).
	Since time.Time
	// Before and After, when not zero, select tasks whose _id is below or
	// above them: a page of ListTasks, with After the page just newer.
	Before, After bson.ObjectID
	// ParamKey and ParamValue, when ParamKey is set, select tasks whose
	// parameters.KEY is the string ParamValue. A key that is not
	// ValidParamKey selects nothing.
	ParamKey, ParamValue string
	Limit                int64
}

// validParamKey is what a parameter search may name: a plain field of
// parameters, never a path (.) or an operator ($).
var validParamKey = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// ValidParamKey reports whether key may be searched (TaskFilter.ParamKey):
// 1 to 64 of A-Z, a-z, 0-9 and _.
func ValidParamKey(key string) bool { return validParamKey.MatchString(key) }

func (f TaskFilter) bson() bson.D {
	d := bson.D{}
	if len(f.Queues) > 0 {
		d = append(d, bson.E{Key: "queue", Value: bson.D{{Key: "$in", Value: f.Queues}}})
	}
	if len(f.Statuses) > 0 {
		d = append(d, bson.E{Key: "status", Value: bson.D{{Key: "$in", Value: f.Statuses}}})
	}
	if f.Node != "" {
		d = append(d, bson.E{Key: "node", Value: f.Node})
	}
	if len(f.Outcomes) > 0 {
		d = append(d, bson.E{Key: FieldOutcome, Value: bson.D{{Key: "$in", Value: f.Outcomes}}})
	}
	id := bson.D{}
	if !f.Since.IsZero() {
		id = append(id, bson.E{Key: "$gte", Value: bson.NewObjectIDFromTimestamp(f.Since)})
	}
	if !f.Before.IsZero() {
		id = append(id, bson.E{Key: "$lt", Value: f.Before})
	}
	if !f.After.IsZero() {
		id = append(id, bson.E{Key: "$gt", Value: f.After})
	}
	if len(id) > 0 {
		d = append(d, bson.E{Key: "_id", Value: id})
	}
	if f.ParamKey != "" {
		if !ValidParamKey(f.ParamKey) {
			return bson.D{{Key: "_id", Value: bson.D{{Key: "$exists", Value: false}}}} // nothing
		}
		d = append(d, bson.E{Key: "parameters." + f.ParamKey, Value: f.ParamValue})
	}
	return d
}

// listFields leaves out what may be large: output and history.
var listFields = bson.D{{Key: "stdout", Value: 0}, {Key: "stderr", Value: 0}, {Key: FieldHistory, Value: 0}}

// ListTasks returns the tasks matching f, newest first, without their
// output and history. Documents without an ObjectId _id are skipped. With
// After and a limit, they are the Limit tasks just above After (still
// listed newest first).
func (s *OperatorStore) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	order := -1
	if !f.After.IsZero() {
		order = 1
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: order}}).SetProjection(listFields)
	if f.Limit > 0 {
		opts.SetLimit(f.Limit)
	}
	list, err := (*conn)(s).collect(ctx, "list tasks", f.bson(), opts)
	if order == 1 {
		slices.Reverse(list)
	}
	return list, err
}

// CountTasks counts the tasks matching f (its Limit aside).
func (s *OperatorStore) CountTasks(ctx context.Context, f TaskFilter) (int64, error) {
	n, err := s.tasks.CountDocuments(ctx, f.bson())
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	return n, nil
}

// collect runs a find on tasks and decodes what it returns; a document
// without an ObjectId _id is skipped (nothing can be done to it by _id).
func (s *conn) collect(ctx context.Context, what string, filter bson.D, opts *options.FindOptionsBuilder) ([]Task, error) {
	cur, err := s.tasks.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer cur.Close(ctx)
	var out []Task
	for cur.Next(ctx) {
		t, err := DecodeTask(append(bson.Raw(nil), cur.Current...))
		if err != nil {
			continue
		}
		out = append(out, t)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// RecentFailures returns the last n tasks that failed (status 2 and up) or
// were orphaned (-6), most recently changed first.
func (s *OperatorStore) RecentFailures(ctx context.Context, n int64) ([]Task, error) {
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusFailed}}}},
		bson.D{{Key: "status", Value: StatusOrphaned}},
	}}}
	opts := options.Find().SetSort(bson.D{{Key: "mtime", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(n).SetProjection(bson.D{
		{Key: "parameters", Value: 0}, {Key: "params", Value: 0}, {Key: "stdout", Value: 0}, {Key: FieldHistory, Value: 0}})
	return (*conn)(s).collect(ctx, "find failed tasks", filter, opts)
}

// CancelOutcome says what Cancel did to one task.
type CancelOutcome int

const (
	CancelSet      CancelOutcome = iota // cancel: true was set
	CancelFinished                      // the task had already ended; nothing written
	CancelNoTask                        // there is no such task
)

// SetCancel sets cancel: true on a task that has not ended: a queued one never
// starts, a running one is stopped by its node (see
// docs/task-control.md). An ended task (finished, cancelled, orphaned) is left alone.
func (s *OperatorStore) SetCancel(ctx context.Context, id bson.ObjectID) (CancelOutcome, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "status", Value: bson.D{{Key: "$lte", Value: 0}, {Key: "$nin", Value: bson.A{StatusCancelled, StatusOrphaned}}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: FieldCancel, Value: true}}}})
	if err != nil {
		return 0, fmt.Errorf("cancel task %s: %w", id.Hex(), err)
	}
	if res.MatchedCount == 1 {
		return CancelSet, nil
	}
	n, err := s.tasks.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return 0, fmt.Errorf("cancel task %s: %w", id.Hex(), err)
	}
	if n == 0 {
		return CancelNoTask, nil
	}
	return CancelFinished, nil
}

// retryable is the filter part that selects tasks a retry may put back:
// every status but queued, claimed and running.
func retryable() bson.D {
	return bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{StatusQueued, StatusClaimed, StatusRunning}}}}}
}

// RetryCandidates returns the tasks matching f that a retry would put
// back (not queued, claimed or running), newest first.
func (s *OperatorStore) RetryCandidates(ctx context.Context, f TaskFilter) ([]Task, error) {
	filter := append(f.bson(), bson.E{Key: "$and", Value: bson.A{retryable()}})
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: "node", Value: 1}})
	if f.Limit > 0 {
		opts.SetLimit(f.Limit)
	}
	return (*conn)(s).collect(ctx, "find tasks to retry", filter, opts)
}

// RetryEnded puts an ended task back in its queue to run again now: status -2,
// node -1, attempts 0 (a fresh retry budget), and den's per-run fields
// removed. The run that ended goes into the task's history as an automatic
// retry records it, marked retried_by "operator", with its output: a file
// id stays one; output kept in the task document is first copied to a
// GridFS file (Disbatch's layout, metadata.task_id), so that every run's
// output can still be read (den output --attempt, the page's history) once
// the new run replaces stdout and stderr. A task that never ran (cancelled
// while queued) has no run to record.
//
// The update is conditional on the status and mtime the task is read with
// here, so a task that changed meanwhile is left alone (false); a file
// written for it then stays, findable by its task_id. A task that had
// finished (status 1 and up) is counted in its queue's count_todo again;
// cancelled and orphaned tasks never left it.
func (s *OperatorStore) RetryEnded(ctx context.Context, t Task, now time.Time) (bool, error) {
	if !t.StatusOK || t.Status == StatusQueued || t.Status == StatusClaimed || t.Status == StatusRunning {
		return false, nil
	}
	// The whole document: t may be a projection (RetryCandidates).
	full, err := (*conn)(s).Task(ctx, t.ID)
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if full == nil || !full.StatusOK || full.Status != t.Status {
		return false, nil
	}
	filter := bson.D{{Key: "_id", Value: t.ID}, {Key: "status", Value: t.Status}}
	if full.mtimeRaw.Type != 0 {
		filter = append(filter, bson.E{Key: "mtime", Value: full.mtimeRaw})
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusQueued}, {Key: "node", Value: Unclaimed}, {Key: FieldAttempts, Value: 0}, {Key: "mtime", Value: now}}},
		{Key: "$unset", Value: bson.D{{Key: FieldStartAfter, Value: ""}, {Key: FieldCancel, Value: ""}, {Key: "timed_out", Value: ""},
			{Key: "exit_code", Value: ""}, {Key: "signal", Value: ""}, {Key: "orphan_reason", Value: ""}, {Key: "runner", Value: ""}, {Key: FieldTimeouts, Value: ""}, {Key: FieldExpired, Value: ""},
			{Key: FieldOutcome, Value: ""}, {Key: FieldOutcomeReason, Value: ""}, {Key: "leftover_processes", Value: ""}, unsetLive, {Key: FieldLiveUntil, Value: ""}, {Key: FieldUnfit, Value: ""}}},
	}
	entry, ran, err := (*conn)(s).endedRun(ctx, *full, now)
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if ran {
		update = append(update, bson.E{Key: "$push", Value: bson.D{{Key: FieldHistory, Value: entry}}})
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, fmt.Errorf("retry task %s: %w", t.ID.Hex(), err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	if Finished(t.Status) {
		_, err := s.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: t.Queue}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}}}})
		if err != nil {
			return true, fmt.Errorf("count retried task %s in its queue: %w (run den counts fix)", t.ID.Hex(), err)
		}
	}
	return true, nil
}

// RetriedByOperator is a history entry's retried_by when an operator put
// the task back (den task retry, the page); automatic retries leave it out.
const RetriedByOperator = "operator"

// endedRun is the history entry of the run an ended task records, and
// whether it ran at all (a node claimed it, or it has output).
func (s *conn) endedRun(ctx context.Context, t Task, now time.Time) (HistoryEntry, bool, error) {
	stdout, stderr := t.Raw.Lookup(StreamStdout), t.Raw.Lookup(StreamStderr)
	if t.Node == "" && absent(stdout) && absent(stderr) && t.Runner == nil {
		return HistoryEntry{}, false, nil
	}
	e := HistoryEntry{Attempt: t.Attempts + 1, Node: t.Node, Status: t.Status, RetriedBy: RetriedByOperator, Ended: t.Mtime,
		Outcome: stringField(t.Raw, FieldOutcome), Reason: stringField(t.Raw, FieldOutcomeReason)}
	if e.Ended.IsZero() {
		e.Ended = now
	}
	if e.Reason == "" {
		e.Reason = stringField(t.Raw, "orphan_reason")
	}
	if n, ok := t.Raw.Lookup("exit_code").AsInt64OK(); ok {
		code := int(n)
		e.ExitCode = &code
	}
	e.Signal = stringField(t.Raw, "signal")
	e.TimedOut, _ = t.Raw.Lookup("timed_out").BooleanOK()
	if n, ok := t.Raw.Lookup("leftover_processes").AsInt64OK(); ok {
		e.Leftovers = int(n)
	}
	if t.Runner != nil {
		e.Started = t.Runner.RunStart()
	}
	if u, ok := UsageOf(t.Raw); ok {
		e.Usage = &u
	}
	if t.Control.Requested != nil {
		r := *t.Control.Requested
		e.Requested = &r
	}
	var err error
	if e.Stdout, err = s.outputFile(ctx, t.ID, StreamStdout, stdout); err != nil {
		return e, true, err
	}
	e.Stderr, err = s.outputFile(ctx, t.ID, StreamStderr, stderr)
	return e, true, err
}

// outputFile is where a history entry finds a run's output stream: its
// GridFS file id, after copying text kept in the task document into a
// file of its own; nil when the run wrote none.
func (s *conn) outputFile(ctx context.Context, task bson.ObjectID, stream string, v bson.RawValue) (any, error) {
	switch v.Type {
	case bson.TypeObjectID:
		return v.ObjectID(), nil
	case bson.TypeString:
		id, err := gridfs.NewBucket(s.db, GridFSPrefix).Put(ctx, stream, bson.D{{Key: "task_id", Value: task}}, []byte(v.StringValue()))
		if err != nil {
			return nil, fmt.Errorf("keep the run's %s in GridFS: %w", stream, err)
		}
		return id, nil
	}
	return nil, nil
}

// stringField is a string field of doc; "" when absent or not a string.
func stringField(doc bson.Raw, key string) string {
	s, _ := doc.Lookup(key).StringValueOK()
	return s
}

// NodeDoc is a node document as an operator reads it.
type NodeDoc struct {
	Name      string
	Timestamp time.Time // zero when not a date
	Queues    []NodeQueue
	// MaxThreads is the operator's node-wide limit (nil: none);
	// MaxThreadsProblem is set when it is not a non-negative whole number.
	MaxThreads        *int
	MaxThreadsProblem string
	// Version is the node's version, when it writes one.
	Version string
	// QueuesLeftOut is how many queues a den node serves but left out of
	// its queues array (den.NodeQueuesMax).
	QueuesLeftOut int
	// Stopped is when a den node said, as it stopped cleanly, that it
	// stopped (zero: it did not; see FieldStopped).
	Stopped time.Time
	Raw     bson.Raw
}

// Live reports whether the node is alive at now: it wrote its document
// within deadAfter, and did not say it stopped since.
func (n NodeDoc) Live(now time.Time, deadAfter time.Duration) bool {
	return !n.Timestamp.IsZero() && now.Sub(n.Timestamp) <= deadAfter && !n.StoppedCleanly()
}

// Node states, as den node list and the page show them.
const (
	NodeRunning = "running" // wrote its document within dead_node_after
	NodeStopped = "stopped" // said it stopped, as it stopped cleanly
	NodeDead    = "dead"    // silent for longer than dead_node_after, without saying it stopped
)

// State is the node's state at now: NodeStopped, NodeRunning or NodeDead.
func (n NodeDoc) State(now time.Time, deadAfter time.Duration) string {
	switch {
	case n.StoppedCleanly():
		return NodeStopped
	case n.Live(now, deadAfter):
		return NodeRunning
	}
	return NodeDead
}

// StoppedCleanly reports whether the node said it stopped, and has not
// written its document since.
func (n NodeDoc) StoppedCleanly() bool {
	return !n.Stopped.IsZero() && !n.Stopped.Before(n.Timestamp)
}

// Nodes returns every node document, by name.
func (s *OperatorStore) Nodes(ctx context.Context) ([]NodeDoc, error) {
	cur, err := s.nodes.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "node", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read node documents: %w", err)
	}
	defer cur.Close(ctx)
	var out []NodeDoc
	for cur.Next(ctx) {
		n := decodeNodeDoc(append(bson.Raw(nil), cur.Current...))
		out = append(out, n)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read node documents: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// decodeNodeDoc reads a node document leniently: what cannot be read is
// left zero.
func decodeNodeDoc(raw bson.Raw) NodeDoc {
	n := NodeDoc{Raw: raw}
	if name, ok := raw.Lookup("node").StringValueOK(); ok {
		n.Name = name
	} else {
		n.Name = raw.Lookup("node").String()
	}
	n.Timestamp, _ = timeValue(raw.Lookup("timestamp"))
	if arr, ok := raw.Lookup("queues").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			var nq NodeQueue
			if doc, ok := v.DocumentOK(); ok && bson.Unmarshal(doc, &nq) == nil {
				n.Queues = append(n.Queues, nq)
			}
		}
	}
	if v := raw.Lookup("maxthreads"); !absent(v) {
		if m, ok := intValue(v); ok && m >= 0 {
			mt := int(min(m, 1<<20))
			n.MaxThreads = &mt
		} else {
			n.MaxThreadsProblem = fmt.Sprintf("maxthreads is %s, not a non-negative whole number or null; nodes treat it as 0", describe(v))
		}
	}
	n.Version, _ = raw.Lookup("version").StringValueOK()
	if left, ok := intValue(raw.Lookup("queues_left_out")); ok {
		n.QueuesLeftOut = int(left)
	}
	n.Stopped, _ = timeValue(raw.Lookup(FieldStopped))
	return n
}

// SetNodeMaxThreads sets a node's node-wide limit (nil removes it: no
// limit). The node must have a document: a typo is an error, not a new
// node.
func (s *OperatorStore) SetNodeMaxThreads(ctx context.Context, node string, limit *int) error {
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: "maxthreads", Value: ""}}}}
	if limit != nil {
		update = bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: int32(*limit)}}}}
	}
	res, err := s.nodes.UpdateOne(ctx, bson.D{{Key: "node", Value: node}}, update)
	if err != nil {
		return fmt.Errorf("set maxthreads of node %s: %w", node, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("no node document for node %q", node)
	}
	return nil
}

// CountDrift is a queue whose stored counts differ from its tasks.
type CountDrift struct {
	Queue Queue
	// Stored values as read (nil: missing, null or not a number).
	StoredTodo, StoredTotal *int64
	// What the tasks say.
	Todo, Total int64
}

// Drifted reports whether the stored counts differ from the tasks'.
func (d CountDrift) Drifted() bool {
	return d.StoredTodo == nil || d.StoredTotal == nil || *d.StoredTodo != d.Todo || *d.StoredTotal != d.Total
}

// CheckCounts compares every usable queue's count_todo and count_total
// with its tasks (one aggregation over the tasks), and returns one entry
// per queue.
func (s *OperatorStore) CheckCounts(ctx context.Context) ([]CountDrift, error) {
	queues, _, err := (*conn)(s).Queues(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := (*conn)(s).TaskCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CountDrift, 0, len(queues))
	for _, q := range queues {
		c := counts[q.ID]
		out = append(out, CountDrift{Queue: q, StoredTodo: q.CountTodo, StoredTotal: q.CountTotal, Todo: c.Todo(), Total: c.Total()})
	}
	return out, nil
}

// FixCounts writes the counts the tasks gave into a drifted queue, on
// condition that the stored counts are still those read: a node or writer
// that moved them meanwhile (a task finished, tasks were added) makes the
// fix change nothing (false), and the check should be run again.
func (s *OperatorStore) FixCounts(ctx context.Context, d CountDrift) (bool, error) {
	filter := bson.D{{Key: "_id", Value: d.Queue.ID}}
	for _, c := range []struct {
		field string
		raw   bson.RawValue
	}{{"count_todo", d.Queue.Raw.Lookup("count_todo")}, {"count_total", d.Queue.Raw.Lookup("count_total")}} {
		if c.raw.Type == 0 {
			filter = append(filter, bson.E{Key: c.field, Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			filter = append(filter, bson.E{Key: c.field, Value: c.raw})
		}
	}
	res, err := s.queues.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: d.Todo}, {Key: "count_total", Value: d.Total}}}})
	if err != nil {
		return false, fmt.Errorf("fix counts of queue %s: %w", d.Queue.ID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// ParseStatus reads a status given by an operator: a number, or a name of
// StatusName (queued, running, failed, ...).
func ParseStatus(s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	for st := StatusOrphaned; st <= StatusFailed; st++ {
		if StatusName(st) == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("status %q: want a number or one of orphaned, cancelled, blocked, terminated, queued, claimed, running, succeeded, failed", s)
}

// Output streams of a task: the fields Task.Output reads.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Ended reports whether a task with this status will not change again
// without someone acting: finished (1 and up), cancelled (-5) or orphaned
// (-6).
func Ended(status int) bool {
	return status >= StatusSucceeded || status == StatusCancelled || status == StatusOrphaned
}
