package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MalformedQueue is a queue document that cannot be used, with the reason.
type MalformedQueue struct {
	ID     any
	Reason error
}

// Queues reads every queue document, the fields den reads only
// (queueProjection): a node reads them every pass, and a queue document
// may hold anything else, up to 16 MiB. Documents that cannot be used at
// all are returned apart, with the reason, so the caller can warn once and
// skip them.
func (s *Store) Queues(ctx context.Context) ([]Queue, []MalformedQueue, error) {
	cur, err := s.queues.Find(ctx, bson.D{}, options.Find().SetProjection(queueProjection).SetBatchSize(oneReply))
	if err != nil {
		return nil, nil, fmt.Errorf("list queues: %w", err)
	}
	defer cur.Close(ctx)
	var good []Queue
	var bad []MalformedQueue
	for cur.Next(ctx) {
		q, err := ParseQueue(append(bson.Raw(nil), cur.Current...))
		if err != nil {
			bad = append(bad, MalformedQueue{ID: cur.Current.Lookup("_id"), Reason: err})
			continue
		}
		good = append(good, q)
	}
	if err := cur.Err(); err != nil {
		return nil, nil, fmt.Errorf("list queues: %w", err)
	}
	return good, bad, nil
}

// WorkRead is what a pass reads of the queues between its reads of every
// queue (QueuesWithWork), besides every queue with tasks to do by its
// counts.
type WorkRead struct {
	// IDs are queues read whatever their counts: those that had work at
	// the last read, whose counts may have fallen to 0.
	IDs []bson.ObjectID
	// Since, when set, also reads the queues whose _id was made at or
	// after it: the queues inserted since the last read of every queue,
	// which no count tells of (a driver's insert of a queue and of its
	// tasks raises none). An _id's time is its writer's clock, to the
	// second: the caller sets Since early enough for the clocks of the
	// writers it expects.
	Since time.Time
}

// QueuesWithWork reads the queues with tasks to do by their counts
// (count_todo a number above 0), the queues named by r.IDs whatever their
// counts, and the queues made since r.Since, as Queues reads them (the
// fields den reads). A node reads them every pass between its reads of
// every queue: what it costs follows the queues with work and the new
// ones, not the queues of the database (with 80,000 queues of which 20
// have work, 20 documents come back, not 80,000). MongoDB answers each
// clause from an index ({count_todo}, and _id for the other two). A
// document that cannot be a queue is left out: Queues reports those.
func (s *Store) QueuesWithWork(ctx context.Context, r WorkRead) ([]Queue, error) {
	return s.findQueues(ctx, QueuesWithWorkFilter(r), "list queues with work")
}

// QueuesByID reads the queues named by ids, as Queues reads them: those
// that are gone, or cannot be queues, are not returned.
func (s *Store) QueuesByID(ctx context.Context, ids []bson.ObjectID) ([]Queue, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.findQueues(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, fmt.Sprintf("read %d queue(s)", len(ids)))
}

// findQueues reads the queues filter matches, the fields den reads,
// leaving out the documents that cannot be queues; doing names the read
// in its error.
func (s *Store) findQueues(ctx context.Context, filter bson.D, doing string) ([]Queue, error) {
	cur, err := s.queues.Find(ctx, filter, options.Find().SetProjection(queueProjection).SetBatchSize(oneReply))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	defer cur.Close(ctx)
	var out []Queue
	for cur.Next(ctx) {
		if q, err := ParseQueue(append(bson.Raw(nil), cur.Current...)); err == nil {
			out = append(out, q)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	return out, nil
}

// QueuesWithWorkFilter is QueuesWithWork's filter: count_todo above 0
// (the {count_todo} index serves it), or an _id of r.IDs, or an _id made
// at or after r.Since (the _id index).
func QueuesWithWorkFilter(r WorkRead) bson.D {
	or := bson.A{bson.D{{Key: "count_todo", Value: bson.D{{Key: "$gt", Value: 0}}}}}
	if len(r.IDs) > 0 {
		or = append(or, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: r.IDs}}}})
	}
	if !r.Since.IsZero() {
		or = append(or, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: bson.NewObjectIDFromTimestamp(r.Since)}}}})
	}
	if len(or) == 1 {
		return or[0].(bson.D)
	}
	return bson.D{{Key: "$or", Value: or}}
}

// CreateQueue inserts a queue document as the protocol defines it, with
// both counts at zero, and returns its _id.
func (s *Store) CreateQueue(ctx context.Context, name, plugin string, maxThreads int, sort string) (bson.ObjectID, error) {
	id := bson.NewObjectID()
	if err := CheckQueueName(name); err != nil {
		return id, err
	}
	_, err := s.queues.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "name", Value: name},
		{Key: "constructor", Value: plugin},
		{Key: "maxthreads", Value: maxThreads},
		{Key: "sort", Value: sort},
		{Key: "count_todo", Value: 0},
		{Key: "count_total", Value: 0},
	})
	if err != nil {
		return id, fmt.Errorf("create queue %q: %w", name, err)
	}
	return id, nil
}

// CountQueues returns how many queue documents there are.
func (s *Store) CountQueues(ctx context.Context) (int64, error) {
	n, err := s.queues.CountDocuments(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("count queues: %w", err)
	}
	return n, nil
}
