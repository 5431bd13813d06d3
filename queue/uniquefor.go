package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds what unique tasks mean to users beside a key of their
// own (unique.go): a key made from the task's parameters (ParamsKey), and
// a key that stays held for a while after its task ended (unique_for).
//
// A task inserted with a hold (FieldUniqueFor, seconds) keeps its
// unique_key when it ends, until FieldUniqueUntil (its end plus the hold):
// the index that holds keys then refuses a twin inserted meanwhile, as it
// refuses one while the task runs, atomically and across nodes. A den
// node's result writes unique_until in the update that records the
// result (Result.KeyHold); a task that ended otherwise (a Perl node, a
// cancel, a rescue) gets its mtime plus the hold, written by the next
// FreeEnded (a node's sweep, or an insert with that key); FreeEnded frees
// a held key only once unique_until has passed.

// Fields of held keys.
const (
	// FieldUniqueFor is how long, in seconds, a task's unique_key stays
	// held after it ended.
	FieldUniqueFor = "unique_for"
	// FieldUniqueUntil is when an ended task's held key is freed.
	FieldUniqueUntil = "unique_until"
)

// MaxUniqueFor is the longest hold den inserts (den task add
// --unique-for), and the longest it reads from a task: a longer one is
// taken as this.
const MaxUniqueFor = 366 * 24 * time.Hour

// KeyHold is how long a task's key stays held after it ends: its
// unique_for, when it holds a key and unique_for is a positive number of
// seconds (at most MaxUniqueFor); 0 otherwise.
func KeyHold(t *Task) time.Duration {
	if t == nil || t.Raw.Lookup(FieldUniqueKey).Type == 0 {
		return 0
	}
	return holdOf(t.Raw.Lookup(FieldUniqueFor))
}

// holdOf reads a unique_for value.
func holdOf(v bson.RawValue) time.Duration {
	f, ok := v.AsFloat64OK()
	if !ok || math.IsNaN(f) || f <= 0 {
		return 0
	}
	if f >= MaxUniqueFor.Seconds() {
		return MaxUniqueFor
	}
	return time.Duration(f * float64(time.Second))
}

// holdBatch is how many ended tasks FreeEnded dates per call.
const holdBatch = 1000

// dateHolds writes unique_until into the ended tasks base selects that
// hold a key with a hold but have no unique_until (they ended without a
// den node's result): their mtime (the time they were found, when it is
// no date) plus their hold. At most holdBatch per call; each write is
// conditional on the task still having none.
func (s *Store) dateHolds(ctx context.Context, base bson.D, now time.Time) error {
	filter := append(slices.Clone(base), endedFilter(),
		bson.E{Key: FieldUniqueFor, Value: bson.D{{Key: "$gt", Value: 0}}},
		bson.E{Key: FieldUniqueUntil, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}})
	cur, err := s.tasks.Find(ctx, filter, options.Find().SetLimit(holdBatch).
		SetProjection(bson.D{{Key: "mtime", Value: 1}, {Key: FieldUniqueFor, Value: 1}}))
	if err != nil {
		return fmt.Errorf("find ended tasks whose unique key is held: %w", err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("find ended tasks whose unique key is held: %w", err)
	}
	for _, d := range docs {
		end, ok := timeValue(d.Lookup("mtime"))
		if !ok {
			end = now
		}
		until := end.Add(holdOf(d.Lookup(FieldUniqueFor)))
		_, err := s.tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.Lookup("_id")}, filter[len(filter)-1]},
			bson.D{{Key: "$set", Value: bson.D{{Key: FieldUniqueUntil, Value: until}}}})
		if err != nil {
			return fmt.Errorf("write when the held unique key of task %s is freed: %w", describe(d.Lookup("_id")), err)
		}
	}
	return nil
}

// ParamsKey is the unique key of a task of a queue made from its
// parameters (den task add --unique): "sha256:" and the hex SHA-256 of
// the queue's id and the parameters' canonical JSON (CanonicalJSON), so
// that the same parameters, in any order of keys and with 7 written 7.0,
// make the same key.
func ParamsKey(queueID bson.ObjectID, params bson.Raw) (string, error) {
	var b bytes.Buffer
	b.WriteString(queueID.Hex())
	b.WriteByte('\n')
	if err := CanonicalJSON(&b, bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: params}); err != nil {
		return "", fmt.Errorf("unique key of the parameters: %w", err)
	}
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalJSON writes v as JSON in one form for one meaning: an
// object's keys sorted (bytewise), no spaces, a number that is a whole
// number (int32, int64, or a double up to 2^53) as an integer, another
// double in Go's shortest form, and any other BSON value (ObjectId, date,
// ...) as its extended JSON, which names its type.
func CanonicalJSON(b *bytes.Buffer, v bson.RawValue) error {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil {
			return err
		}
		slices.SortFunc(elems, func(x, y bson.RawElement) int { return bytes.Compare([]byte(x.Key()), []byte(y.Key())) })
		b.WriteByte('{')
		for i, e := range elems {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(e.Key())
			b.Write(k)
			b.WriteByte(':')
			if err := CanonicalJSON(b, e.Value()); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return err
		}
		b.WriteByte('[')
		for i, x := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := CanonicalJSON(b, x); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case bson.TypeString:
		s, _ := json.Marshal(v.StringValue())
		b.Write(s)
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		if n, ok := intValue(v); ok {
			b.WriteString(strconv.FormatInt(n, 10))
			break
		}
		if f := v.Double(); !math.IsNaN(f) && !math.IsInf(f, 0) {
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
			break
		}
		b.WriteString(v.String()) // {"$numberDouble": "NaN"}
	case bson.TypeBoolean:
		b.WriteString(strconv.FormatBool(v.Boolean()))
	case bson.TypeNull:
		b.WriteString("null")
	default:
		b.WriteString(v.String()) // its extended JSON: {"$oid": ...}, {"$date": ...}
	}
	return nil
}
