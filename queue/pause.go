package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FieldPaused is den's mark of a paused queue: {maxthreads, threads, at,
// by}, the limits the queue had (each only when it had it) and when and by
// whom it was paused. A paused queue's maxthreads and threads are 0, which
// every Perl node honours (those that read maxthreads and those that read
// threads); den also runs nothing of a queue with the mark, whatever its
// limits say, and ResumeQueue writes the kept limits back exactly.
const FieldPaused = "paused"

// Pause is a paused queue's mark: the limits it had, and when and by whom
// it was paused.
type Pause struct {
	// MaxThreads and Threads are the limits the queue had, as stored
	// (Type 0: it had none).
	MaxThreads bson.RawValue
	Threads    bson.RawValue
	At         time.Time
	By         string
}

// Limit is the limit the queue resumes with, as den queue list shows it:
// "4 per node", "10 on all nodes", or "none".
func (p Pause) Limit() string {
	v, where := p.MaxThreads, "per node"
	if absent(v) {
		v, where = p.Threads, "on all nodes"
	}
	if absent(v) {
		return "none"
	}
	if n, ok := intValue(v); ok {
		return fmt.Sprintf("%d %s", n, where)
	}
	return describe(v) + " " + where
}

// parsePause reads a queue's paused field: nil when the queue is not
// paused. Any value but null marks the queue paused (a mark written by
// hand in another shape still stops den); only a document keeps limits.
func parsePause(raw bson.Raw) *Pause {
	v := raw.Lookup(FieldPaused)
	if absent(v) {
		return nil
	}
	p := &Pause{}
	if d, ok := v.DocumentOK(); ok {
		p.MaxThreads = d.Lookup(SettingMaxThreads)
		p.Threads = d.Lookup(SettingThreads)
		p.At, _ = timeValue(d.Lookup("at"))
		p.By, _ = d.Lookup("by").StringValueOK()
	}
	return p
}

// PauseOutcome says what PauseQueue or ResumeQueue did.
type PauseOutcome int

const (
	// PauseDone: the queue was paused (or resumed).
	PauseDone PauseOutcome = iota
	// PauseAlready: the queue was already paused (or was not paused);
	// nothing was written.
	PauseAlready
)

// errChanged is a queue that changed between the read and the write.
var errChanged = errors.New("the queue changed while it was being paused or resumed")

// PauseQueue pauses a queue: it keeps the queue's maxthreads and threads
// (as stored, each only when present) in its paused field with at and by,
// and sets both limits to 0. One update, conditional on the limits read,
// so a limit written meanwhile is not lost; a queue already paused is left
// as it is (PauseAlready).
func (s *Store) PauseQueue(ctx context.Context, id bson.ObjectID, by string, now time.Time) (PauseOutcome, error) {
	return s.pauseOrResume(ctx, id, "pause", func(raw bson.Raw) (bson.D, bson.D, bool) {
		if parsePause(raw) != nil {
			return nil, nil, false
		}
		kept := bson.D{}
		for _, k := range []string{SettingMaxThreads, SettingThreads} {
			if v := raw.Lookup(k); v.Type != 0 {
				kept = append(kept, bson.E{Key: k, Value: v})
			}
		}
		kept = append(kept, bson.E{Key: "at", Value: now}, bson.E{Key: "by", Value: by})
		return bson.D{{Key: SettingMaxThreads, Value: int32(0)}, {Key: SettingThreads, Value: int32(0)}, {Key: FieldPaused, Value: kept}}, nil, true
	})
}

// ResumeQueue resumes a paused queue: its maxthreads and threads become
// what they were when it was paused (or what den queue set wrote into the
// kept values since), a limit it did not have is removed, and so is the
// paused field. A queue that is not paused is left as it is
// (PauseAlready).
func (s *Store) ResumeQueue(ctx context.Context, id bson.ObjectID) (PauseOutcome, error) {
	return s.pauseOrResume(ctx, id, "resume", func(raw bson.Raw) (bson.D, bson.D, bool) {
		p := parsePause(raw)
		if p == nil {
			return nil, nil, false
		}
		set, unset := bson.D{}, bson.D{{Key: FieldPaused, Value: ""}}
		for _, f := range []struct {
			key string
			v   bson.RawValue
		}{{SettingMaxThreads, p.MaxThreads}, {SettingThreads, p.Threads}} {
			if f.v.Type == 0 {
				unset = append(unset, bson.E{Key: f.key, Value: ""})
			} else {
				set = append(set, bson.E{Key: f.key, Value: f.v})
			}
		}
		return set, unset, true
	})
}

// pauseOrResume reads the queue, asks change what to write, and writes it
// on condition that the fields it reads (limits and mark) are as read;
// when they changed meanwhile it reads again, a few times.
func (s *Store) pauseOrResume(ctx context.Context, id bson.ObjectID, what string, change func(bson.Raw) (set, unset bson.D, ok bool)) (PauseOutcome, error) {
	for range 5 {
		raw, err := s.queues.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return 0, fmt.Errorf("%s queue %s: %w", what, id.Hex(), ErrNoQueue)
		}
		if err != nil {
			return 0, fmt.Errorf("%s queue %s: %w", what, id.Hex(), err)
		}
		set, unset, ok := change(raw)
		if !ok {
			return PauseAlready, nil
		}
		filter := bson.D{{Key: "_id", Value: id}}
		for _, k := range []string{SettingMaxThreads, SettingThreads, FieldPaused} {
			if v := raw.Lookup(k); v.Type == 0 {
				filter = append(filter, bson.E{Key: k, Value: bson.D{{Key: "$exists", Value: false}}})
			} else {
				filter = append(filter, bson.E{Key: k, Value: bson.D{{Key: "$eq", Value: v}}})
			}
		}
		update := bson.D{}
		if len(set) > 0 {
			update = append(update, bson.E{Key: "$set", Value: set})
		}
		if len(unset) > 0 {
			update = append(update, bson.E{Key: "$unset", Value: unset})
		}
		res, err := s.queues.UpdateOne(ctx, filter, update)
		if err != nil {
			return 0, fmt.Errorf("%s queue %s: %w", what, id.Hex(), err)
		}
		if res.MatchedCount == 1 {
			return PauseDone, nil
		}
	}
	return 0, fmt.Errorf("%s queue %s: %w; try again", what, id.Hex(), errChanged)
}

// keptLimit is the name under which a paused queue keeps a limit key.
func keptLimit(key string) string { return FieldPaused + "." + key }
