package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FieldRateLimit is the queue field that holds its rate limit:
// {starts: N, per: SECONDS}, at most N of the queue's tasks start in any
// period of per seconds, on all den nodes together.
const FieldRateLimit = "rate_limit"

// RateLimitsCollection is den's own collection of the starts each
// rate-limited queue granted: one document per queue, _id the queue's
// _id. A Perl Disbatch node neither reads nor writes it.
const RateLimitsCollection = "rate_limits"

// Bounds of a rate limit. A queue's document in RateLimitsCollection holds
// its last starts, at most MaxRateStarts of them (a few tens of KiB); a
// longer period than MaxRatePer is a schedule's job.
const (
	MaxRateStarts = 1000
	MaxRatePer    = 7 * 24 * time.Hour
	minRatePer    = time.Millisecond
)

// RateLimit is a queue's rate limit: at most Starts of its tasks start in
// any period of length Per (a sliding window).
type RateLimit struct {
	Starts int
	Per    time.Duration
}

// String is the limit as den queue set takes it: 2/10s.
func (l RateLimit) String() string { return strconv.Itoa(l.Starts) + "/" + l.Per.String() }

// DecodeRateLimit reads a queue's rate_limit: a document {starts: N, per:
// SECONDS}, N a whole number from 1 to MaxRateStarts and per a number of
// seconds (or a duration string, "10s") above 0 and at most MaxRatePer.
// Missing or null: no limit (nil). Anything else is an error, and the
// queue cannot be used (ParseQueue): a node that ignored a limit it cannot
// read would start the queue's tasks without one.
func DecodeRateLimit(v bson.RawValue) (*RateLimit, error) {
	if absent(v) {
		return nil, nil
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return nil, fmt.Errorf("is %s; want a document {starts: N, per: SECONDS}", describe(v))
	}
	elems, _ := doc.Elements()
	for _, e := range elems {
		if k := e.Key(); k != "starts" && k != "per" {
			return nil, fmt.Errorf("has a field %q; want only starts and per", k)
		}
	}
	n, err := DecodeCount(doc.Lookup("starts"))
	if err != nil || n < 1 || n > MaxRateStarts {
		return nil, fmt.Errorf("starts is %s; want a whole number from 1 to %d", describe(doc.Lookup("starts")), MaxRateStarts)
	}
	per, err := DecodeSeconds(doc.Lookup("per"))
	if err != nil || per < minRatePer || per > MaxRatePer {
		return nil, fmt.Errorf("per is %s; want a number of seconds above 0, at most %d", describe(doc.Lookup("per")), int(MaxRatePer.Seconds()))
	}
	return &RateLimit{Starts: int(n), Per: per}, nil
}

// ParseRateLimit reads a rate limit as an operator writes it on den's
// command line: N/PERIOD, PERIOD seconds or a duration ("2/10", "2/10s",
// "100/1m").
func ParseRateLimit(s string) (RateLimit, error) {
	starts, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return RateLimit{}, fmt.Errorf("rate_limit %q: want STARTS/PERIOD, such as 2/10s (2 starts in any 10 seconds)", s)
	}
	doc, _ := bson.Marshal(bson.D{{Key: "starts", Value: strings.TrimSpace(starts)}, {Key: "per", Value: strings.TrimSpace(per)}})
	l, err := DecodeRateLimit(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc})
	if err != nil {
		return RateLimit{}, fmt.Errorf("rate_limit %q: %w", s, err)
	}
	return *l, nil
}

// Document is the limit as den writes it in a queue document: starts a
// whole number, per a number of seconds.
func (l RateLimit) Document() bson.D {
	var per any = l.Per.Seconds()
	if l.Per%time.Second == 0 {
		per = int64(l.Per / time.Second)
	}
	return bson.D{{Key: "starts", Value: int32(l.Starts)}, {Key: "per", Value: per}}
}

// RateLimits holds the queues' rate limits in the database
// (RateLimitsCollection), so that den nodes together never start more of
// a queue's tasks in a period than its limit allows.
//
// A queue limited to N starts has N slots, one document each: {_id:
// "QUEUE/I", queue, slot: I, at, task, node}, at the time of the start
// the slot granted last. A start is granted by taking a slot whose start
// has left the window (at <= now - per) and writing the new start into
// it, in one findOneAndUpdate: the condition and the write are one command
// on one document, so two nodes cannot take the same slot, and a slot is
// only taken once its start is out of the window. The starts in any
// window are then each in a slot of their own: never more than N. (A
// single document holding the last N starts, kept with $push, $sort and
// $slice, would be one document; the development server ignores $sort and
// $slice without an error, and would let the list grow and the limit go.)
//
// The collection is read as untrusted input: anyone who can write the
// database can write in it. A slot is one of the queue's only when its
// _id is "QUEUE/I" for its own queue and slot (slotID); any other
// document is ignored by the reads, and deleted by a take it would have
// granted a start (Grant.Repaired). A slot whose at cannot be a start a
// den node wrote (not a date, or later than SlotAhead after now) is free,
// as a deleted slot is: the take that finds it writes its start there.
// So no document stops a queue, nor lets more of its tasks start than its
// limit.
type RateLimits struct {
	coll *mongo.Collection
}

// SlotAhead is how far past now a slot's start may lie and still be taken
// for one a den node wrote: the nodes' clocks (Clock) agree on the
// server's time to within a round trip, so a start dated later was forged
// (or written by a clock that is not the server's), and the slot is free.
const SlotAhead = time.Minute

// maxTakeTries bounds the tries of one take: the documents it deletes on
// its way (forged slots it found instead of the queue's own), and the
// free slots its read found that another taker took first. Past it, the
// take is refused until the next claim round, which goes on with the
// rest.
const maxTakeTries = 16

// NewRateLimits returns the rate limits of a database.
func NewRateLimits(db *mongo.Database) *RateLimits {
	return &RateLimits{coll: db.Collection(RateLimitsCollection)}
}

// slotID is the _id of slot i of queue q.
func slotID(q bson.ObjectID, i int) string { return q.Hex() + "/" + strconv.Itoa(i) }

// Grant is the answer to a take of a start.
type Grant struct {
	// OK is set when the start is granted.
	OK bool
	// Next is, when refused, when the oldest start in the window leaves
	// it: the queue may start a task again then.
	Next time.Time
	// Repaired are the documents of RateLimitsCollection the take put
	// right on its way, each said once: a slot whose at could not be a
	// start, rewritten by the start it granted; a document that is not
	// one of the queue's slots, deleted; a slot naming another queue or
	// slot, made anew.
	Repaired []string
}

// takeFilter matches a slot of queue q under limit l that is free at now:
// its start has left the window, or it cannot be a start (at not a date,
// missing, or more than SlotAhead ahead of now).
func takeFilter(q bson.ObjectID, l RateLimit, now time.Time) bson.D {
	return bson.D{{Key: "queue", Value: q}, {Key: "slot", Value: bson.D{{Key: "$gte", Value: 0}, {Key: "$lt", Value: l.Starts}}},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "at", Value: bson.D{{Key: "$lte", Value: now.Add(-l.Per)}}}},
			bson.D{{Key: "at", Value: bson.D{{Key: "$gt", Value: now.Add(SlotAhead)}}}},
			bson.D{{Key: "at", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}},
		}}}
}

// Take asks for one start of queue q, under its limit l, for task, at now
// (the server's time as the node estimates it: Clock). It is granted when
// one of the queue's l.Starts slots is free (takeFilter), and the start is
// written into that slot in the same command. Refused, Next is when the
// oldest start in the window leaves it (one more read, only then). When
// that read finds a slot free after all (made or freed by another taker
// between the two commands), the take tries again: a start is refused
// only when the read found no slot free. The first time a queue is
// limited, or its limit raised, its new slots are made then (one more
// write, once).
func (r *RateLimits) Take(ctx context.Context, q bson.ObjectID, l RateLimit, task bson.ObjectID, node string, now time.Time) (Grant, error) {
	now = now.Truncate(time.Millisecond) // a BSON date holds milliseconds
	var g Grant
	made := false
	for range maxTakeTries {
		before, err := r.coll.FindOneAndUpdate(ctx, takeFilter(q, l, now),
			bson.D{{Key: "$set", Value: bson.D{{Key: "at", Value: now}, {Key: "task", Value: task}, {Key: "node", Value: node}}}}).Raw()
		if err == nil {
			note, forged := takenSlot(q, before, now)
			if note != "" {
				g.Repaired = append(g.Repaired, note)
			}
			if !forged {
				g.OK = true
				return g, nil
			}
			if _, err := r.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: before.Lookup("_id")}}); err != nil {
				return g, fmt.Errorf("delete a forged rate limit slot of queue %s: %w", q.Hex(), err)
			}
			continue
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return g, fmt.Errorf("take a start of queue %s (rate limit %s): %w", q.Hex(), l, err)
		}
		// No slot was free: the window is full, or the slots are not
		// made yet, or were made or freed since (by another taker,
		// between the take and this read).
		slots, err := r.read(ctx, []bson.ObjectID{q}, now)
		if err != nil {
			return g, err
		}
		s := slots[q]
		if s.free(l, now) {
			continue // made or freed since the take looked: take it
		}
		if s.count(l) < l.Starts && !made {
			made = true
			notes, err := r.makeSlots(ctx, q, l, s)
			g.Repaired = append(g.Repaired, notes...)
			if err != nil {
				return g, err
			}
			continue
		}
		if g.Next = s.next(l); !g.Next.After(now) {
			g.Next = now // slots missing still: the next claim round makes them
		}
		return g, nil
	}
	// Every try found a slot that was gone by the next command (forged
	// documents deleted, or other takers first): the next claim round
	// goes on.
	g.Next = now
	return g, nil
}

// takenSlot says what a take found in the document before it wrote its
// start (before): forged when it is not one of queue q's slots (its _id
// is not slotID of its slot), else a note when its at could not be a
// start at now ("" when it was one).
func takenSlot(q bson.ObjectID, before bson.Raw, now time.Time) (note string, forged bool) {
	id := before.Lookup("_id")
	i, ok := intValue(before.Lookup("slot"))
	if s, isString := id.StringValueOK(); !ok || !isString || s != slotID(q, int(i)) {
		return fmt.Sprintf("deleted a document of queue %s that is not one of its slots (_id %s), which a start was about to be counted in", q.Hex(), describe(id)), true
	}
	at := before.Lookup("at")
	if t, ok := at.TimeOK(); !ok {
		return fmt.Sprintf("slot %d of queue %s held at %s, not a start's time: a start is written there now", i, q.Hex(), describe(at)), false
	} else if t.After(now.Add(SlotAhead)) {
		return fmt.Sprintf("slot %d of queue %s held a start at %s, ahead of every node's clock: a start is written there now", i, q.Hex(), t.UTC().Format(time.RFC3339)), false
	}
	return "", false
}

// makeSlots makes the slots of queue q that its limit l has and the
// database does not, each free (its start at the zero time). Another node
// making them at the same time is no error: each slot is made once. A
// slot's _id taken by a document that names another queue or slot (which
// the reads do not take for the slot) is made anew, free, with a note.
func (r *RateLimits) makeSlots(ctx context.Context, q bson.ObjectID, l RateLimit, have queueSlots) ([]string, error) {
	var docs []any
	var slots []int
	for i := range l.Starts {
		if _, ok := have[i]; !ok {
			docs = append(docs, freeSlot(q, i))
			slots = append(slots, i)
		}
	}
	if len(docs) == 0 {
		return nil, nil
	}
	_, err := r.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		if err != nil {
			return nil, fmt.Errorf("make the rate limit slots of queue %s: %w", q.Hex(), err)
		}
		return nil, nil
	}
	var notes []string
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we) || we.Index < 0 || we.Index >= len(slots) {
			return notes, fmt.Errorf("make the rate limit slots of queue %s: %w", q.Hex(), err)
		}
		i := slots[we.Index]
		res, err := r.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: slotID(q, i)},
			{Key: "$nor", Value: bson.A{bson.D{{Key: "queue", Value: q}, {Key: "slot", Value: i}}}}}, freeSlot(q, i))
		if err != nil {
			return notes, fmt.Errorf("make rate limit slot %d of queue %s anew: %w", i, q.Hex(), err)
		}
		if res.ModifiedCount > 0 {
			notes = append(notes, fmt.Sprintf("slot %d of queue %s named another queue or slot: made anew, free", i, q.Hex()))
		}
	}
	return notes, nil
}

// freeSlot is slot i of queue q, free.
func freeSlot(q bson.ObjectID, i int) bson.D {
	return bson.D{{Key: "_id", Value: slotID(q, i)}, {Key: "queue", Value: q}, {Key: "slot", Value: int32(i)}, {Key: "at", Value: time.Unix(0, 0).UTC()}}
}

// queueSlots are the starts a queue's slots hold, by slot.
type queueSlots map[int]time.Time

// count is how many of the slots of limit l exist.
func (s queueSlots) count(l RateLimit) int {
	n := 0
	for i := range s {
		if i < l.Starts {
			n++
		}
	}
	return n
}

// free says whether one of the slots of limit l is free at now: its start
// has left the window, or it holds none (read maps a start that cannot be
// one to the zero time). The take's filter (takeFilter) matches it.
func (s queueSlots) free(l RateLimit, now time.Time) bool {
	for i, at := range s {
		if i < l.Starts && !at.After(now.Add(-l.Per)) {
			return true
		}
	}
	return false
}

// next is when a queue with these slots may start a task under l: when
// the oldest start its slots hold leaves the window (zero: a slot is
// missing, so a start is free).
func (s queueSlots) next(l RateLimit) time.Time {
	if s.count(l) < l.Starts {
		return time.Time{}
	}
	var oldest time.Time
	first := true
	for i, at := range s {
		if i < l.Starts && (first || at.Before(oldest)) {
			oldest, first = at, false
		}
	}
	return oldest.Add(l.Per)
}

// read reads the slots of the given queues, with one query, as they are
// at now: only the queues' own slots (slotID), a start that cannot be one
// (at not a date, or more than SlotAhead ahead) read as free.
func (r *RateLimits) read(ctx context.Context, ids []bson.ObjectID, now time.Time) (map[bson.ObjectID]queueSlots, error) {
	cur, err := r.coll.Find(ctx, bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "queue", Value: 1}, {Key: "slot", Value: 1}, {Key: "at", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read the rate limit slots of %d queue(s): %w", len(ids), err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("read the rate limit slots of %d queue(s): %w", len(ids), err)
	}
	out := map[bson.ObjectID]queueSlots{}
	for _, d := range docs {
		q, ok := d.Lookup("queue").ObjectIDOK()
		i, iok := intValue(d.Lookup("slot"))
		id, _ := d.Lookup("_id").StringValueOK()
		if !ok || !iok || i < 0 || id != slotID(q, int(i)) {
			continue // not one of the queue's slots
		}
		at, tok := d.Lookup("at").TimeOK()
		if !tok || at.After(now.Add(SlotAhead)) {
			at = time.Time{} // cannot be a start: free, as the take finds it
		}
		if out[q] == nil {
			out[q] = queueSlots{}
		}
		out[q][int(i)] = at
	}
	return out, nil
}

// NextStarts reads, with one query, which of the given rate-limited queues
// are at their limit at now, and when each may start a task again.
// Queues not at their limit are left out.
func (r *RateLimits) NextStarts(ctx context.Context, limits map[bson.ObjectID]RateLimit, now time.Time) (map[bson.ObjectID]time.Time, error) {
	out := map[bson.ObjectID]time.Time{}
	if len(limits) == 0 {
		return out, nil
	}
	ids := make([]bson.ObjectID, 0, len(limits))
	for id := range limits {
		ids = append(ids, id)
	}
	slots, err := r.read(ctx, ids, now)
	if err != nil {
		return nil, err
	}
	for id, l := range limits {
		if next := slots[id].next(l); next.After(now) {
			out[id] = next
		}
	}
	return out, nil
}
