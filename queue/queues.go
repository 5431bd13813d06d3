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

// CreateQueue inserts a queue document as the protocol defines it, with
// both counts at zero, and returns its _id.
func (s *Store) CreateQueue(ctx context.Context, name, plugin string, maxThreads int, sort string) (bson.ObjectID, error) {
	id := bson.NewObjectID()
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
