package queue

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds how operators insert tasks and list, count and page
// through them.

// InsertOptions are what InsertTasks gives every task it inserts besides
// its parameters.
type InsertOptions struct {
	// After lists the tasks they come after (FieldAfter); Waiting those
	// of them not yet succeeded. With Waiting, the tasks are inserted
	// blocked (-4) and registered; with only After, queued and registered.
	After, Waiting []bson.ObjectID
	// Params writes the parameters as params, the spelling Disbatch 4's
	// web API writes and its nodes read, instead of the protocol's
	// parameters (den nodes read both): set it for a queue of that
	// schema (Queue.ParamsField).
	Params bool
	// Priority, when not 0, is written as each task's priority
	// (FieldPriority); 0, the default, writes no field.
	Priority int64
	// UniqueKey, when set, is the one task's unique_key (unique.go): it is
	// inserted only if no unfinished task of its queue holds that key, else
	// the error is a *KeyHeldError naming the task that does. Only one
	// task may be inserted with a key.
	UniqueKey string
	// UniqueFor, with UniqueKey, keeps the key held for so long after
	// the task ended (FieldUniqueFor, uniquefor.go): a twin inserted
	// meanwhile is refused too. At most MaxUniqueFor.
	UniqueFor time.Duration
}

// InsertTasks inserts one queued task per parameters document into a
// queue, in one command, and raises the queue's count_todo and count_total
// by exactly the number inserted. It returns the ids of the tasks it
// inserted; when the insert fails part way, the error, and the ids of
// those that did land (counted).
func (s *Store) InsertTasks(ctx context.Context, queueID bson.ObjectID, params []bson.Raw, now time.Time, opts InsertOptions) ([]bson.ObjectID, error) {
	if len(params) == 0 {
		return nil, nil
	}
	if opts.UniqueKey != "" {
		if err := s.prepare(ctx, queueID, opts.UniqueKey, len(params), now); err != nil {
			return nil, err
		}
	}
	status := StatusQueued
	if len(opts.Waiting) > 0 {
		status = StatusBlocked
	}
	paramsField := FieldParameters
	if opts.Params {
		paramsField = FieldParams
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
		if opts.Priority != 0 {
			doc = append(doc, bson.E{Key: FieldPriority, Value: opts.Priority})
		}
		if opts.UniqueKey != "" {
			doc = append(doc, bson.E{Key: FieldUniqueKey, Value: opts.UniqueKey})
			if opts.UniqueFor > 0 {
				doc = append(doc, bson.E{Key: FieldUniqueFor, Value: min(opts.UniqueFor, MaxUniqueFor).Seconds()})
			}
		}
		docs[i] = doc
	}
	landed := ids
	_, insertErr := s.tasks.InsertMany(ctx, docs)
	if opts.UniqueKey != "" && IsDuplicateKey(insertErr) {
		held, err := s.KeyHolder(context.WithoutCancel(ctx), queueID, opts.UniqueKey)
		if err != nil {
			return nil, fmt.Errorf("%v (%w)", held, err)
		}
		return nil, held
	}
	if insertErr != nil {
		// What landed is not known from the error (a network failure says
		// nothing): ask.
		found, err := s.Statuses(context.WithoutCancel(ctx), ids)
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
	// parameter KEY, under either name (parameters.KEY or params.KEY,
	// ParamCondition), equals ParamValue (a string, number or bool), or
	// one of its values when it is a []any (ParseParamValue's). A key that
	// is not ValidParamKey selects nothing.
	ParamKey   string
	ParamValue any
	Limit      int64
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
		d = append(d, ParamCondition(f.ParamKey, f.ParamValue))
	}
	return d
}

// listFields leaves out what may be large: output and history.
var listFields = bson.D{{Key: "stdout", Value: 0}, {Key: "stderr", Value: 0}, {Key: FieldHistory, Value: 0}}

// ListTasks returns the tasks matching f, newest first, without their
// output and history. Documents without an ObjectId _id are skipped. With
// After and a limit, they are the Limit tasks just above After (still
// listed newest first).
func (s *Store) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	order := -1
	if !f.After.IsZero() {
		order = 1
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: order}}).SetProjection(listFields)
	if f.Limit > 0 {
		opts.SetLimit(f.Limit)
	}
	list, err := s.collect(ctx, "list tasks", f.bson(), opts)
	if order == 1 {
		slices.Reverse(list)
	}
	return list, err
}

// CountTasks counts the tasks matching f (its Limit aside).
func (s *Store) CountTasks(ctx context.Context, f TaskFilter) (int64, error) {
	n, err := s.tasks.CountDocuments(ctx, f.bson())
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	return n, nil
}

// collect runs a find on tasks and decodes what it returns; a document
// without an ObjectId _id is skipped (nothing can be done to it by _id).
func (s *Store) collect(ctx context.Context, what string, filter bson.D, opts *options.FindOptionsBuilder) ([]Task, error) {
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
