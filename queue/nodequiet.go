package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Quieting a node: it claims nothing new, and the tasks it runs go on to
// their end. Like a paused queue, a quiet node has maxthreads 0 in its
// node document, and what it had is kept beside it in quiet: {maxthreads
// (only when it had one), at, by}; resuming puts it back. Node maxthreads
// is Disbatch's own field, which every node honours, a Perl Disbatch node
// too, so quiet works on any node of the database.

// FieldQuiet marks a quiet node's document and keeps its maxthreads.
const FieldQuiet = "quiet"

// ErrNoNode is the answer for a name no node document has.
var ErrNoNode = errors.New("no node document")

// Quiet is a quiet node's mark, as QuietOf reads it.
type Quiet struct {
	MaxThreads bson.RawValue // what it resumes with; absent: no limit
	At         time.Time
	By         string
}

// Limit is the maxthreads a quiet node resumes with, as text ("none").
func (q Quiet) Limit() string {
	if absent(q.MaxThreads) {
		return "none"
	}
	if n, ok := intValue(q.MaxThreads); ok {
		return fmt.Sprint(n)
	}
	return describe(q.MaxThreads)
}

// QuietOf reads a node document's quiet mark: nil when it is not quiet.
func QuietOf(raw bson.Raw) *Quiet {
	v := raw.Lookup(FieldQuiet)
	if absent(v) {
		return nil
	}
	q := &Quiet{}
	if d, ok := v.DocumentOK(); ok {
		q.MaxThreads = d.Lookup(SettingMaxThreads)
		q.At, _ = timeValue(d.Lookup("at"))
		q.By, _ = d.Lookup("by").StringValueOK()
	}
	return q
}

// Quiet is the node's quiet mark when it is quiet: marked (QuietOf) with
// maxthreads 0. A node whose maxthreads was set since it was quieted
// (den node set) claims again, with that limit: it is not quiet, though
// its mark stays until it is resumed. nil: not quiet.
func (n NodeDoc) Quiet() *Quiet {
	q := QuietOf(n.Raw)
	if q == nil || n.MaxThreads == nil || *n.MaxThreads != 0 {
		return nil
	}
	return q
}

// QuietNode quiets a node: maxthreads 0, its own kept in quiet with at and
// by, in one update conditional on the maxthreads read (a limit written
// meanwhile is not lost). A quiet node is left as it is (PauseAlready).
func (s *Store) QuietNode(ctx context.Context, name, by string, now time.Time) (PauseOutcome, error) {
	return s.quietChange(ctx, name, "quiet", func(raw bson.Raw) (bson.D, bool) {
		if QuietOf(raw) != nil {
			return nil, false
		}
		kept := bson.D{}
		if v := raw.Lookup(SettingMaxThreads); v.Type != 0 {
			kept = append(kept, bson.E{Key: SettingMaxThreads, Value: v})
		}
		kept = append(kept, bson.E{Key: "at", Value: now}, bson.E{Key: "by", Value: by})
		return bson.D{{Key: "$set", Value: bson.D{{Key: SettingMaxThreads, Value: int32(0)}, {Key: FieldQuiet, Value: kept}}}}, true
	})
}

// ResumeNode ends a node's quiet: its maxthreads becomes what it was (none
// when it had none), and the mark goes. A node that is not quiet is left
// as it is (PauseAlready).
func (s *Store) ResumeNode(ctx context.Context, name string) (PauseOutcome, error) {
	return s.quietChange(ctx, name, "resume", func(raw bson.Raw) (bson.D, bool) {
		q := QuietOf(raw)
		if q == nil {
			return nil, false
		}
		unset := bson.D{{Key: FieldQuiet, Value: ""}}
		if absent(q.MaxThreads) {
			unset = append(unset, bson.E{Key: SettingMaxThreads, Value: ""})
			return bson.D{{Key: "$unset", Value: unset}}, true
		}
		return bson.D{{Key: "$set", Value: bson.D{{Key: SettingMaxThreads, Value: q.MaxThreads}}}, {Key: "$unset", Value: unset}}, true
	})
}

// change reads the node's document, asks edit for the update (false:
// nothing to do), and writes it on condition that maxthreads and quiet
// are still as read.
func (s *Store) quietChange(ctx context.Context, name, what string, edit func(bson.Raw) (bson.D, bool)) (PauseOutcome, error) {
	raw, err := s.nodes.FindOne(ctx, bson.D{{Key: "node", Value: name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return PauseAlready, fmt.Errorf("%s node %s: %w for node %q", what, name, ErrNoNode, name)
	}
	if err != nil {
		return PauseAlready, fmt.Errorf("%s node %s: %w", what, name, err)
	}
	update, ok := edit(raw)
	if !ok {
		return PauseAlready, nil
	}
	filter := bson.D{{Key: "_id", Value: raw.Lookup("_id")}}
	for _, k := range []string{SettingMaxThreads, FieldQuiet} {
		if v := raw.Lookup(k); v.Type == 0 {
			filter = append(filter, bson.E{Key: k, Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			filter = append(filter, bson.E{Key: k, Value: v})
		}
	}
	res, err := s.nodes.UpdateOne(ctx, filter, update, options.UpdateOne())
	if err != nil {
		return PauseAlready, fmt.Errorf("%s node %s: %w", what, name, err)
	}
	if res.MatchedCount == 0 {
		return PauseAlready, fmt.Errorf("%s node %s: its maxthreads changed meanwhile; look again (den node list)", what, name)
	}
	return PauseDone, nil
}
