package queue

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Retiring is den task purge and archive for a selection a person
// confirmed by its count (the page's bulk purge and archive): the ended
// tasks a RetireFilter selects, counted, bounded by the newest, and
// removed page by page as RetireTasks does. A type of its own on the same
// connection, so that the operator store keeps its size.
type Retiring conn

// NewRetiring returns the retiring of a database's tasks.
func NewRetiring(db *mongo.Database) *Retiring { return (*Retiring)(newConn(db)) }

// Newest is the _id of the newest ended task f selects; zero when none.
func (s *Retiring) Newest(ctx context.Context, f RetireFilter) (bson.ObjectID, error) {
	var doc struct {
		ID bson.ObjectID `bson:"_id"`
	}
	err := s.tasks.FindOne(ctx, f.bson(), options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}}).SetProjection(bson.D{{Key: "_id", Value: 1}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc.ID, nil
	}
	if err != nil {
		return doc.ID, fmt.Errorf("find the newest ended task: %w", err)
	}
	return doc.ID, nil
}

// Count counts the ended tasks f selects, those a task not yet ended
// comes after included (Page leaves them out).
func (s *Retiring) Count(ctx context.Context, f RetireFilter) (int64, error) {
	n, err := s.tasks.CountDocuments(ctx, f.bson())
	if err != nil {
		return 0, fmt.Errorf("count ended tasks: %w", err)
	}
	return n, nil
}

// Page is OperatorStore.RetireCandidates with where to go on from: the
// ended tasks of one page (f.Limit, oldest first, AfterID on), without
// those an unended task comes after, how many it read and the last it
// read.
func (s *Retiring) Page(ctx context.Context, f RetireFilter) ([]Task, int, bson.ObjectID, error) {
	return (*conn)(s).RetirePage(ctx, f)
}

// Retire removes tasks as Page returned them (RetireTasks).
func (s *Retiring) Retire(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error) {
	return (*conn)(s).RetireTasks(ctx, tasks, mode)
}
