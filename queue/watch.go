package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Arrivals is a stream of the queues that new queued tasks arrive in, from
// a change stream on tasks. Only a replica set or a sharded cluster has
// change streams; WatchArrivals fails on a standalone server and on the
// development server.
type Arrivals struct {
	stream *mongo.ChangeStream
}

// WatchArrivals opens a change stream of task inserts with status -2,
// each event carrying only the task's queue.
func (s *Store) WatchArrivals(ctx context.Context) (*Arrivals, error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "operationType", Value: "insert"}, {Key: "fullDocument.status", Value: StatusQueued}}}},
		{{Key: "$project", Value: bson.D{{Key: "fullDocument.queue", Value: 1}}}},
	}
	// An idle stream costs one getMore per MaxAwaitTime (the server's
	// default is 1 s); events still come as soon as they happen.
	cs, err := s.tasks.Watch(ctx, pipeline, options.ChangeStream().SetMaxAwaitTime(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("watch task inserts: %w", err)
	}
	return &Arrivals{stream: cs}, nil
}

// Next waits for the next arrival and returns its queue. It fails when the
// stream has failed (the driver has already resumed it where it could) or
// ctx is done.
func (a *Arrivals) Next(ctx context.Context) (bson.ObjectID, error) {
	for a.stream.Next(ctx) {
		if id, ok := a.stream.Current.Lookup("fullDocument", "queue").ObjectIDOK(); ok {
			return id, nil
		}
	}
	if err := a.stream.Err(); err != nil {
		return bson.ObjectID{}, fmt.Errorf("watch task inserts: %w", err)
	}
	return bson.ObjectID{}, fmt.Errorf("watch task inserts: %w", ctx.Err())
}

// Close closes the stream.
func (a *Arrivals) Close(ctx context.Context) error { return a.stream.Close(ctx) }
