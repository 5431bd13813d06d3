package queue

import (
	"context"
	"fmt"

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
func (s *conn) Queues(ctx context.Context) ([]Queue, []MalformedQueue, error) {
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

// QueuesWithWork reads the queues with tasks to do by their counts
// (count_todo a number above 0), and the queues named by ids whatever
// their counts, as Queues reads them (the fields den reads). A node reads
// them every pass between its reads of every queue: what it costs follows
// the queues with work, not the queues of the database (with 80,000 queues
// of which 20 have work, 20 documents come back, not 80,000). A document
// that cannot be a queue is left out: Queues reports those.
func (s *NodeStore) QueuesWithWork(ctx context.Context, ids []bson.ObjectID) ([]Queue, error) {
	cur, err := s.queues.Find(ctx, QueuesWithWorkFilter(ids), options.Find().SetProjection(queueProjection).SetBatchSize(oneReply))
	if err != nil {
		return nil, fmt.Errorf("list queues with work: %w", err)
	}
	defer cur.Close(ctx)
	var out []Queue
	for cur.Next(ctx) {
		if q, err := ParseQueue(append(bson.Raw(nil), cur.Current...)); err == nil {
			out = append(out, q)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list queues with work: %w", err)
	}
	return out, nil
}

// QueuesWithWorkFilter is QueuesWithWork's filter: count_todo above 0
// (the {count_todo} index serves it), or an _id of ids (the _id index).
func QueuesWithWorkFilter(ids []bson.ObjectID) bson.D {
	filter := bson.D{{Key: "count_todo", Value: bson.D{{Key: "$gt", Value: 0}}}}
	if len(ids) > 0 {
		filter = bson.D{{Key: "$or", Value: bson.A{filter, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}}}}
	}
	return filter
}

// CreateQueue inserts a queue document as the protocol defines it, with
// both counts at zero, and returns its _id.
func (s *OperatorStore) CreateQueue(ctx context.Context, name, plugin string, maxThreads int, sort string) (bson.ObjectID, error) {
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
func (s *OperatorStore) CountQueues(ctx context.Context) (int64, error) {
	n, err := s.queues.CountDocuments(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("count queues: %w", err)
	}
	return n, nil
}
