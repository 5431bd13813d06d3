package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds what operators do to queue documents (den queue, the
// web pages, the Disbatch web API): find, create, change and delete them.

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
	FieldMaxProcesses, FieldUsageInterval, FieldMemoryRetryFactor, FieldRateLimit, FieldRetention,
	FieldRetention + "." + RetainSucceeded, FieldRetention + "." + RetainFailed, FieldRetention + "." + RetainCancelled,
	FieldRetention + "." + RetainOrphaned, FieldRetention + ".action", FieldRetention + ".reports"}

// QueueSettings are values to write into a queue document, each already
// checked and in the form den writes it. Unset lists keys to remove.
type QueueSettings struct {
	Set   bson.D
	Unset []string
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

// AmbiguousQueueError is FindQueue's refusal of a ref that several queues
// answer to (a name they share, or one queue's name that is another's id).
type AmbiguousQueueError struct {
	Ref string
	IDs []string // the ids of the queues that match, as written in the error
}

func (e *AmbiguousQueueError) Error() string {
	return fmt.Sprintf("%d queues match %q (%s): give the id", len(e.IDs), e.Ref, strings.Join(e.IDs, ", "))
}

// ErrQueueExists is returned when a queue of the name given exists.
var ErrQueueExists = errors.New("a queue of that name exists")

// MaxQueueName is the longest name den gives a queue (den queue create
// and set, the Disbatch web API), in bytes. A name a writer put in the
// database may be longer: tables and pages show it cut (ShownName).
const MaxQueueName = 200

// ErrQueueName is the refusal of a name den does not give a queue
// (CheckQueueName).
var ErrQueueName = errors.New("refused queue name")

// CheckQueueName says why den does not give a queue this name, or nil:
// it is empty, longer than MaxQueueName bytes, not UTF-8, or 24
// hexadecimal digits. The last is how den, its web page and the Disbatch
// web API name a queue by its id: such a name, when it is another queue's
// id, would stand beside that queue wherever it is named, so den refuses
// every one, whether or not it is some queue's id now (a queue created
// later may get it).
func CheckQueueName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: a queue needs a name", ErrQueueName)
	case len(name) > MaxQueueName:
		return fmt.Errorf("%w: %d bytes; a queue's name is at most %d", ErrQueueName, len(name), MaxQueueName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w %q: not UTF-8", ErrQueueName, name)
	}
	if _, err := bson.ObjectIDFromHex(name); err == nil {
		return fmt.Errorf("%w %q: 24 hexadecimal digits are how den and the Disbatch API name a queue by its id; choose another name", ErrQueueName, name)
	}
	return nil
}

// ShownName is a queue's name as tables and pages show it: whatever a
// writer put in the database, cut to MaxQueueName bytes (at a character's
// start), ending with "…" when cut. JSON answers (--json, the Disbatch
// web API) give the name whole.
func ShownName(name string) string { return cutName(name, MaxQueueName) }

// cutName is name cut to at most max bytes, at a character's start, with
// "…" at the end when it was cut.
func cutName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

// FindQueue returns the queue whose _id (as hex) or name is ref: a ref of
// 24 hexadecimal digits is the queue with that _id when there is one (so
// that no name a writer gives another queue hides a queue from its id),
// else the queue of that name. The document is returned even when it
// cannot be used (problem says why), so that an operator can fix or
// delete it. Two queues of that name are an error naming their ids.
func (s *Store) FindQueue(ctx context.Context, ref string) (q Queue, problem, err error) {
	if id, err := bson.ObjectIDFromHex(ref); err == nil {
		raw, err := s.queues.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		switch {
		case err == nil:
			if q, problem = ParseQueue(raw); q.ID.IsZero() {
				return q, nil, fmt.Errorf("queue %q: %w", ref, problem)
			}
			return q, problem, nil
		case !errors.Is(err, mongo.ErrNoDocuments):
			return q, nil, fmt.Errorf("find queue %q: %w", ref, err)
		}
	}
	cur, err := s.queues.Find(ctx, bson.D{{Key: "name", Value: ref}}, options.Find().SetLimit(3))
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
			ids = append(ids, DocID(d)) // hex: the ref FindQueue takes
		}
		return q, nil, &AmbiguousQueueError{Ref: ref, IDs: ids}
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
func (s *Store) CreateQueueWith(ctx context.Context, settings QueueSettings) (bson.ObjectID, error) {
	var id bson.ObjectID
	var name string
	for _, e := range settings.Set {
		if e.Key == SettingName {
			name, _ = e.Value.(string)
		}
	}
	if err := CheckQueueName(name); err != nil {
		return id, err
	}
	switch {
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
func (s *Store) UpdateQueue(ctx context.Context, id bson.ObjectID, settings QueueSettings) error {
	_, err := s.UpdateQueueResult(ctx, id, settings)
	return err
}

// UpdateQueueResult is UpdateQueue, and says what the update matched and
// changed (the Disbatch web API answers with both). A plugin given as
// SettingPluginLater is written as plugin, and constructor (which would
// shadow it) removed.
func (s *Store) UpdateQueueResult(ctx context.Context, id bson.ObjectID, settings QueueSettings) (UpdateResult, error) {
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
		if err := CheckQueueName(name); err != nil {
			return UpdateResult{}, err
		}
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
func (s *Store) DeleteQueue(ctx context.Context, id bson.ObjectID) error {
	res, err := s.queues.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", id.Hex(), err)
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("delete queue %s: %w", id.Hex(), ErrNoQueue)
	}
	return nil
}
