package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds unique tasks: at most one unfinished task per unique_key
// and queue, held by a unique index, never by a read then a write.
//
// The key a task holds is its field unique_key (a string). The index
// UniqueKeyIndex is unique on {unique_key, queue}, and takes only the
// tasks that have the field: on MongoDB by its partialFilterExpression
// {unique_key: {$exists: true}}; on a server without partial indexes
// (FerretDB 1.x, the development server) it is a plain unique index, which
// there leaves out documents without the field as well (its SQL index
// treats a missing field as NULL, and NULLs never collide; measured on its
// SQLite and PostgreSQL engines). Whatever inserts a second unfinished task
// with a key its queue's unfinished task holds - den, the mongo shell, any
// driver - gets the server's duplicate-key error (E11000).
//
// Once a task has ended (Ended: finished, cancelled, orphaned) its key is
// freed by renaming unique_key to unique_key_freed, so that the index no
// longer holds it and the task still says which key it had. A den node
// does that in the same update that records a run's result (no command
// more), its sweep does it for the tasks that ended otherwise (a Perl
// Disbatch node's, a cancel, a rescue: one updateMany every SweepEvery), and
// an insert with a key does it for that key first (FreeEnded), so that a
// task a Perl node finished a moment ago does not refuse the next one. A
// retry by an operator takes the key back (RetryEnded), or is refused while
// another unfinished task holds it.

// Fields of unique tasks.
const (
	// FieldUniqueKey is the key an unfinished task holds (a string).
	FieldUniqueKey = "unique_key"
	// FieldUniqueKeyFreed is the key a task held until it ended.
	FieldUniqueKeyFreed = "unique_key_freed"
)

// MaxUniqueKey is the longest unique_key den inserts, and the longest the
// index that holds keys is made over, in bytes: an index key must stay well
// under the servers' limits (PostgreSQL, under the development server,
// refuses an index row over 8 KiB; MongoDB before 4.2 a key over 1 KiB).
// A task a writer inserted with a longer key is taken out of the index's
// way before the index is made (TakeOutOversized).
const MaxUniqueKey = 512

// UniqueKeyIndex is the index that holds the unique keys.
var UniqueKeyIndex = Index{
	Collection: TasksCollection,
	Keys:       bson.D{{Key: FieldUniqueKey, Value: 1}, {Key: "queue", Value: 1}},
	Unique:     true,
	Partial:    bson.D{{Key: FieldUniqueKey, Value: bson.D{{Key: "$exists", Value: true}}}},
	Without:    "unique keys are not held: a second unfinished task with a key its queue's holds is not refused, and den task add --unique-key is refused until the index exists",
}

// CheckUniqueKey says what is wrong with a unique key given by a user, or
// nil.
func CheckUniqueKey(key string) error {
	switch {
	case key == "":
		return errors.New("unique key: empty")
	case len(key) > MaxUniqueKey:
		return fmt.Errorf("unique key: %d bytes, at most %d", len(key), MaxUniqueKey)
	case !utf8.ValidString(key):
		return errors.New("unique key: not UTF-8")
	}
	return nil
}

// KeyHeldError is the refusal of a task whose unique key an unfinished
// task of its queue holds.
type KeyHeldError struct {
	Queue bson.ObjectID
	Key   string
	// Holder is the task that holds the key, and Status its status; zero
	// when it ended (or went) between the refusal and the look-up.
	Holder bson.ObjectID
	Status int
	// Until is when the key is freed, when the holder has ended and holds
	// it for a while (unique_until, uniquefor.go); zero otherwise.
	Until time.Time
}

func (e *KeyHeldError) Error() string {
	if e.Holder.IsZero() {
		return fmt.Sprintf("unique key %q is held in queue %s by a task that has just ended or gone; try again", e.Key, e.Queue.Hex())
	}
	if Ended(e.Status) && !e.Until.IsZero() {
		return fmt.Sprintf("unique key %q is held in queue %s by task %s, which ended (status %d, %s) and holds it until %s (its unique_for)",
			e.Key, e.Queue.Hex(), e.Holder.Hex(), e.Status, StatusName(e.Status), e.Until.UTC().Format(time.RFC3339))
	}
	if Ended(e.Status) { // it ended between the refusal and the look-up
		return fmt.Sprintf("unique key %q was held in queue %s by task %s, which has just ended (status %d, %s); try again",
			e.Key, e.Queue.Hex(), e.Holder.Hex(), e.Status, StatusName(e.Status))
	}
	return fmt.Sprintf("unique key %q is held in queue %s by task %s (status %d, %s); it is free again once that task has ended",
		e.Key, e.Queue.Hex(), e.Holder.Hex(), e.Status, StatusName(e.Status))
}

// IsDuplicateKey reports whether err is a unique index's refusal,
// MongoDB's E11000, by its code. The development server answers as
// MongoDB does: its proxy rewrites FerretDB's refusals, which quote the
// engine's error in an InternalError, into E11000 (den/devdb/dupkey.go).
func IsDuplicateKey(err error) bool { return mongo.IsDuplicateKeyError(err) }

// endedFilter selects the tasks that have ended (Ended).
func endedFilter() bson.E {
	return bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusSucceeded}}}},
		bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusCancelled, StatusOrphaned}}}}},
	}}
}

// freeKey is the update that frees a task's key.
var freeKey = bson.E{Key: "$rename", Value: bson.D{{Key: FieldUniqueKey, Value: FieldUniqueKeyFreed}}}

// FreeEnded frees the keys of the tasks that have ended but still hold
// one: every such task (the sweep), or, with a key, the one of that key in
// that queue. A key held after its task ended (uniquefor.go) is freed
// only once its unique_until is not after now; a held task that has none
// yet gets it first (dateHolds). It returns how many it freed.
func (s *Store) FreeEnded(ctx context.Context, queueID bson.ObjectID, key string, now time.Time) (int64, error) {
	filter := bson.D{{Key: FieldUniqueKey, Value: bson.D{{Key: "$exists", Value: true}}}}
	if key != "" {
		filter = bson.D{{Key: FieldUniqueKey, Value: key}, {Key: "queue", Value: queueID}}
	}
	if err := s.dateHolds(ctx, filter, now); err != nil {
		return 0, err
	}
	free := bson.E{Key: "$and", Value: bson.A{bson.D{endedFilter()}, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: FieldUniqueFor, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: 0}}}}}},
		bson.D{{Key: FieldUniqueUntil, Value: bson.D{{Key: "$lte", Value: now}}}},
	}}}}}
	filter = append(filter, free)
	if some, err := anyTask(ctx, s.tasks, filter); err != nil || !some {
		if err != nil {
			return 0, fmt.Errorf("free the unique keys of ended tasks: %w", err)
		}
		return 0, nil
	}
	res, err := s.tasks.UpdateMany(ctx, filter, bson.D{freeKey})
	if err != nil {
		return 0, fmt.Errorf("free the unique keys of ended tasks: %w", err)
	}
	return res.ModifiedCount, nil
}

// KeyHolder returns the refusal of key in a queue, naming the unfinished
// task that holds it.
func (s *Store) KeyHolder(ctx context.Context, queueID bson.ObjectID, key string) (*KeyHeldError, error) {
	held := &KeyHeldError{Queue: queueID, Key: key}
	raw, err := s.tasks.FindOne(ctx, bson.D{{Key: FieldUniqueKey, Value: key}, {Key: "queue", Value: queueID}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "status", Value: 1}, {Key: FieldUniqueUntil, Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return held, nil
	}
	if err != nil {
		return held, fmt.Errorf("find the task that holds unique key %q: %w", key, err)
	}
	// Whatever a user put there: an _id that is no ObjectId, a status that
	// is no number, are shown as zero rather than failing the refusal.
	held.Holder, _ = raw.Lookup("_id").ObjectIDOK()
	if st, ok := raw.Lookup("status").AsInt64OK(); ok {
		held.Status = int(st)
	}
	if until, ok := raw.Lookup(FieldUniqueUntil).TimeOK(); ok {
		held.Until = until
	}
	return held, nil
}

// EnsureUniqueKeys creates UniqueKeyIndex when it is not there yet (a den node
// creates it when it starts, with the others; an insert with a key makes
// sure of it, since the key holds only by it), after taking the keys too
// long for it out of its way (TakeOutOversized).
func (s *Store) EnsureUniqueKeys(ctx context.Context) error {
	names, err := indexNames(ctx, s.tasks)
	if err != nil {
		return err
	}
	if names[UniqueKeyIndex.Name()] {
		return nil
	}
	if _, err := s.TakeOutOversized(ctx); err != nil {
		return err
	}
	if err := createIndexFreeing(ctx, s.db, UniqueKeyIndex); err != nil {
		return fmt.Errorf("create index %s on %s: %w", UniqueKeyIndex.Name(), TasksCollection, err)
	}
	return nil
}

// prepare readies the insert of n tasks with a key into a queue: the key
// is valid, n is 1, the index that holds keys exists, and the key of a
// task of the queue that has ended is freed.
func (s *Store) prepare(ctx context.Context, queueID bson.ObjectID, key string, n int, now time.Time) error {
	if err := CheckUniqueKey(key); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("unique key %q: %d tasks, but a unique key is for one task", key, n)
	}
	if err := s.EnsureUniqueKeys(ctx); err != nil {
		return err
	}
	_, err := s.FreeEnded(ctx, queueID, key, now)
	return err
}

// OversizedKeys are the tasks TakeOutOversized took out of the way of the
// index that holds keys.
type OversizedKeys struct {
	// Failed are unfinished tasks not yet claimed, failed (status 2) with
	// the reason in their stderr; Moved are tasks that had ended, or were
	// claimed or running, whose key went to unique_key_freed.
	Failed, Moved []bson.ObjectID
}

// Any reports whether any task was taken out of the index's way.
func (o OversizedKeys) Any() bool { return len(o.Failed)+len(o.Moved) > 0 }

// oversizedBatch is how many tasks with an oversized key one query of
// TakeOutOversized reads.
const oversizedBatch = 1000

// oversizedFilter matches the tasks whose unique_key may be longer than
// MaxUniqueKey: a string of more than MaxUniqueKey/4 characters (a
// character is at most 4 bytes in UTF-8), or a value of another type.
// keyTooLong decides.
var oversizedFilter = bson.D{{Key: "$or", Value: bson.A{
	bson.D{{Key: FieldUniqueKey, Value: bson.D{{Key: "$regex", Value: fmt.Sprintf(`^[\s\S]{%d,}`, MaxUniqueKey/4+1)}}}},
	bson.D{{Key: FieldUniqueKey, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "string"}}}}}},
}}}

// keyTooLong says why a task's unique_key v is too long for the index, or
// "" when it is not: a string's bytes, or another value's BSON, longer
// than MaxUniqueKey.
func keyTooLong(v bson.RawValue) string {
	if str, ok := v.StringValueOK(); ok {
		if len(str) > MaxUniqueKey {
			return fmt.Sprintf("its unique_key is %d bytes, at most %d: no index holds a longer key", len(str), MaxUniqueKey)
		}
		return ""
	}
	if len(v.Value) > MaxUniqueKey {
		return fmt.Sprintf("its unique_key is a %s of %d bytes, at most %d: no index holds a longer key", v.Type, len(v.Value), MaxUniqueKey)
	}
	return ""
}

// TakeOutOversized takes the tasks whose unique_key is longer than
// MaxUniqueKey (keyTooLong: inserted by a writer before the index that
// holds keys existed) out of that index's way, so that it can be made: an
// unfinished task not yet claimed (queued, held, blocked) fails, with the
// reason in its stderr and its queue's count_todo lowered by one (it
// would otherwise run without the uniqueness it asked for); a task that
// ended, or is claimed or running, keeps its status, and its key goes to
// unique_key_freed. Each write is conditional on the task being as read;
// the time written is the server's ($currentDate).
func (s *Store) TakeOutOversized(ctx context.Context) (OversizedKeys, error) {
	var out OversizedKeys
	for {
		cur, err := s.tasks.Find(ctx, oversizedFilter, options.Find().SetLimit(oversizedBatch).
			SetProjection(bson.D{{Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: "node", Value: 1}, {Key: FieldUniqueKey, Value: 1}}))
		if err != nil {
			return out, fmt.Errorf("find tasks whose unique_key is too long for its index: %w", err)
		}
		var docs []bson.Raw
		if err := cur.All(ctx, &docs); err != nil {
			return out, fmt.Errorf("find tasks whose unique_key is too long for its index: %w", err)
		}
		changed := 0
		for _, d := range docs {
			reason := keyTooLong(d.Lookup(FieldUniqueKey))
			if reason == "" {
				continue
			}
			failed, ok, err := s.takeOut(ctx, d, reason)
			if err != nil {
				return out, err
			}
			if ok {
				changed++
				id, _ := d.Lookup("_id").ObjectIDOK()
				if failed {
					out.Failed = append(out.Failed, id)
				} else {
					out.Moved = append(out.Moved, id)
				}
			}
		}
		if len(docs) < oversizedBatch || changed == 0 {
			return out, nil
		}
	}
}

// takeOut takes one task d (as read) whose key is too long out of the
// index's way (TakeOutOversized): failed says which way, ok whether the
// task was still as read.
func (s *Store) takeOut(ctx context.Context, d bson.Raw, reason string) (failed, ok bool, err error) {
	filter := bson.D{{Key: "_id", Value: d.Lookup("_id")}, asRead(d, "status"), asRead(d, "node")}
	update := bson.D{{Key: "$rename", Value: bson.D{{Key: FieldUniqueKey, Value: FieldUniqueKeyFreed}}}}
	st, isNumber := intValue(d.Lookup("status"))
	failed = isNumber && !Ended(int(st)) && st != StatusClaimed && st != StatusRunning
	if failed {
		update = append(update,
			bson.E{Key: "$set", Value: bson.D{{Key: "status", Value: StatusFailed}, {Key: "stdout", Value: ""},
				{Key: "stderr", Value: "den: task not run: " + reason + "\n"},
				{Key: FieldOutcome, Value: OutcomeMalformed}, {Key: FieldOutcomeReason, Value: reason}}},
			bson.E{Key: "$currentDate", Value: bson.D{{Key: "mtime", Value: true}}})
	}
	res, err := s.tasks.UpdateOne(ctx, filter, update)
	if err != nil {
		return failed, false, fmt.Errorf("take task %s's unique_key out of its index's way: %w", describe(d.Lookup("_id")), err)
	}
	if res.ModifiedCount == 0 {
		return failed, false, nil
	}
	if q, isID := d.Lookup("queue").ObjectIDOK(); failed && isID && st <= 0 {
		if err := s.DecrementTodo(ctx, q); err != nil {
			return failed, true, err
		}
	}
	return failed, true, nil
}

// asRead is a filter's condition that field key of a document is as it was
// read in d: the value, or missing.
func asRead(d bson.Raw, key string) bson.E {
	if v := d.Lookup(key); v.Type != 0 {
		return bson.E{Key: key, Value: v}
	}
	return bson.E{Key: key, Value: bson.D{{Key: "$exists", Value: false}}}
}
