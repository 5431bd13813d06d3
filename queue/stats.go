package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StatsCollection is den's time series for the status page's charts: one
// document per queue and per node for each step of StatsSteps (a minute,
// a quarter of an hour, an hour). Nodes write it about once a minute
// (AddStats); the page reads one step's documents since a time (Stats),
// never the tasks. Disbatch nodes neither read nor write it.
//
// A queue's document holds, for its step starting at t: the tasks that
// finished in it (succeeded: status 1; failed: any other final status),
// added up by $inc from each node's own completions, with the number of
// those runs and their seconds from hand-over to the end; and the backlog
// (queued: count_todo; running: claimed and running on all nodes) as the
// last node that wrote it in that step saw it; and how long its runs took
// and its tasks waited, counted by bucket (run_ms, wait_ms: Durations).
// A node's document holds the tasks it finished in the step (succeeded,
// failed, added up by $inc), and the tasks it held and its host's
// 1-minute load average, as it last wrote them in that step (sampled).
const StatsCollection = "stats"

// StatsSteps are the steps of the time series, finest first: the page
// draws an hour in minutes, a day in quarters of an hour and a week in
// hours.
var StatsSteps = []time.Duration{time.Minute, 15 * time.Minute, time.Hour}

// StatsRetention is how long stats documents are kept: a week, and a day
// to spare. TrimStats deletes older ones.
const StatsRetention = 8 * 24 * time.Hour

// QueueStat is what one node adds to a queue's time series for the time
// At: its completions (Succeeded, Failed, with Runs and RunSeconds: how
// many runs it timed and their seconds) and, when Backlog is set, the
// queue's backlog as it sees it (Queued, Running).
type QueueStat struct {
	Queue bson.ObjectID
	Name  string
	At    time.Time

	Succeeded, Failed int64
	Runs              int64
	RunSeconds        float64
	// RunTimes and WaitTimes count the runs' times and their tasks'
	// waits by bucket (nil: none).
	RunTimes, WaitTimes Durations

	Backlog         bool
	Queued, Running int64
}

// NodeStat is a node's own sample for the time At: the tasks it held and
// its host's 1-minute load average; and the tasks it finished in At's
// step (Succeeded, Failed), added to what it wrote before. With
// NoSample, only the finished tasks are written.
type NodeStat struct {
	Node    string
	At      time.Time
	Running int64
	Load    float64

	Succeeded, Failed int64
	NoSample          bool
}

// StatPoint is one stats document: a queue's (Kind "queue": Queue and
// Name) or a node's (Kind "node": Node) values for the step of Step
// starting at T.
type StatPoint struct {
	Kind  string        `bson:"kind"`
	Queue bson.ObjectID `bson:"queue,omitempty"`
	Name  string        `bson:"name,omitempty"`
	Node  string        `bson:"node,omitempty"`
	Step  int64         `bson:"step"` // seconds
	T     time.Time     `bson:"t"`

	Succeeded  int64   `bson:"succeeded"`
	Failed     int64   `bson:"failed"`
	Runs       int64   `bson:"runs"`
	RunSeconds float64 `bson:"run_seconds"`
	Queued     int64   `bson:"queued"`
	Running    int64   `bson:"running"`
	// Sampled is set in a queue's document once a node wrote its backlog
	// (Queued, Running) in it, and in a node's once it wrote its sample
	// (Running, Load; documents of den before it counted a node's
	// finished tasks have neither those nor Sampled).
	Sampled bool    `bson:"sampled"`
	Load    float64 `bson:"load"`
	// RunMs and WaitMs count a queue's runs by how long they took and
	// its tasks by how long they waited, by bucket: keys DurationKey.
	RunMs  map[string]int64 `bson:"run_ms,omitempty"`
	WaitMs map[string]int64 `bson:"wait_ms,omitempty"`
}

// RunTimes are p's runs counted by how long they took.
func (p StatPoint) RunTimes() Durations { return durationsOf(p.RunMs) }

// WaitTimes are p's tasks counted by how long they waited to start.
func (p StatPoint) WaitTimes() Durations { return durationsOf(p.WaitMs) }

// NodeSampled reports whether p, a node's document, holds its sample
// (Running, Load): it does unless it only counts finished tasks.
func (p StatPoint) NodeSampled() bool { return p.Sampled || p.Succeeded+p.Failed == 0 }

// Kinds of stats documents.
const (
	StatQueue = "queue"
	StatNode  = "node"
)

// AddStats writes qs and ns into the stats collection, each into its
// document of every step, in one bulkWrite of upserts keyed by _id
// (kind, key, step and the step's start), so that the completions of
// several nodes add up and a document is made by whichever writes first.
// Each entry is one update per step, whatever it counts: the time
// buckets are $inc'ed in it (only those not zero), never one per task.
func (s *Store) AddStats(ctx context.Context, qs []QueueStat, ns []NodeStat) error {
	if len(qs) == 0 && len(ns) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, 0, len(StatsSteps)*(len(qs)+len(ns)))
	for _, step := range StatsSteps {
		secs := int64(step / time.Second)
		for _, q := range qs {
			t := q.At.Truncate(step).UTC()
			set := bson.D{{Key: "name", Value: q.Name}}
			if q.Backlog {
				set = append(set, bson.E{Key: "queued", Value: q.Queued}, bson.E{Key: "running", Value: q.Running}, bson.E{Key: "sampled", Value: true})
			}
			inc := bson.D{{Key: "succeeded", Value: q.Succeeded}, {Key: "failed", Value: q.Failed},
				{Key: "runs", Value: q.Runs}, {Key: "run_seconds", Value: q.RunSeconds}}
			inc = incDurations(inc, "run_ms", q.RunTimes)
			inc = incDurations(inc, "wait_ms", q.WaitTimes)
			update := bson.D{
				{Key: "$setOnInsert", Value: bson.D{{Key: "kind", Value: StatQueue}, {Key: "queue", Value: q.Queue}, {Key: "step", Value: secs}, {Key: "t", Value: t}}},
				{Key: "$set", Value: set},
				{Key: "$inc", Value: inc},
			}
			id := fmt.Sprintf("q %s %d %d", q.Queue.Hex(), secs, t.Unix())
			models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpdate(update).SetUpsert(true))
		}
		for _, n := range ns {
			t := n.At.Truncate(step).UTC()
			update := bson.D{
				{Key: "$setOnInsert", Value: bson.D{{Key: "kind", Value: StatNode}, {Key: "node", Value: n.Node}, {Key: "step", Value: secs}, {Key: "t", Value: t}}},
				{Key: "$inc", Value: bson.D{{Key: "succeeded", Value: n.Succeeded}, {Key: "failed", Value: n.Failed}}},
			}
			if !n.NoSample {
				update = append(update, bson.E{Key: "$set", Value: bson.D{{Key: "running", Value: n.Running}, {Key: "load", Value: n.Load}, {Key: "sampled", Value: true}}})
			}
			id := fmt.Sprintf("n %d %d %s", secs, t.Unix(), n.Node)
			models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpdate(update).SetUpsert(true))
		}
	}
	if _, err := s.db.Collection(StatsCollection).BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("write stats (%d queue and %d node samples): %w", len(qs), len(ns), err)
	}
	return nil
}

// incDurations adds to inc the buckets of d that are not zero, as
// field.KEY.
func incDurations(inc bson.D, field string, d Durations) bson.D {
	for i, n := range d {
		if n != 0 {
			inc = append(inc, bson.E{Key: field + "." + DurationKey(i), Value: n})
		}
	}
	return inc
}

// StatsQuery selects stats documents: those of step Step from Since on,
// of one kind (StatQueue, StatNode; empty: both), and of one queue when
// Queue is set, of one node when Node is.
type StatsQuery struct {
	Step  time.Duration
	Since time.Time
	Kind  string
	Queue bson.ObjectID
	Node  string
}

// Stats returns the stats documents q selects, in time order: one query,
// in one reply (the index on step and t finds them). A document it cannot
// decode is left out.
func (s *Store) Stats(ctx context.Context, q StatsQuery) ([]StatPoint, error) {
	filter := bson.D{{Key: "step", Value: int64(q.Step / time.Second)}, {Key: "t", Value: bson.D{{Key: "$gte", Value: q.Since}}}}
	if q.Kind != "" {
		filter = append(filter, bson.E{Key: "kind", Value: q.Kind})
	}
	if !q.Queue.IsZero() {
		filter = append(filter, bson.E{Key: "queue", Value: q.Queue})
	}
	if q.Node != "" {
		filter = append(filter, bson.E{Key: "node", Value: q.Node})
	}
	cur, err := s.db.Collection(StatsCollection).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "t", Value: 1}}).SetBatchSize(oneReply))
	if err != nil {
		return nil, fmt.Errorf("read stats since %s: %w", q.Since.Format(time.RFC3339), err)
	}
	defer cur.Close(ctx)
	var out []StatPoint
	for cur.Next(ctx) {
		var p StatPoint
		if err := bson.Unmarshal(cur.Current, &p); err != nil {
			continue // not written by a node (a string for a count, say): left out
		}
		out = append(out, p)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read stats since %s: %w", q.Since.Format(time.RFC3339), err)
	}
	return out, nil
}

// TrimStats deletes at most limit stats documents older than before (by
// the start of their step): one query for their _ids (the index on t
// finds them) and one delete. It returns how many it deleted; fewer than
// limit means none older are left.
func (s *Store) TrimStats(ctx context.Context, before time.Time, limit int64) (int64, error) {
	coll := s.db.Collection(StatsCollection)
	cur, err := coll.Find(ctx, bson.D{{Key: "t", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(limit).SetBatchSize(int32(min(limit, oneReply))))
	if err != nil {
		return 0, fmt.Errorf("find stats older than %s: %w", before.Format(time.RFC3339), err)
	}
	var ids bson.A
	for cur.Next(ctx) {
		ids = append(ids, cur.Current.Lookup("_id"))
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return 0, fmt.Errorf("find stats older than %s: %w", before.Format(time.RFC3339), err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return 0, fmt.Errorf("delete %d stats older than %s: %w", len(ids), before.Format(time.RFC3339), err)
	}
	return res.DeletedCount, nil
}
