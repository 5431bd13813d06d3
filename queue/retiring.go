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
// tasks a RetireFilter selects, counted (RetireCount), bounded by the
// newest (RetireNewest), and removed page by page (RetirePage,
// RetireTasks).

// RetireNewest is the _id of the newest ended task f selects; zero when none.
func (s *Store) RetireNewest(ctx context.Context, f RetireFilter) (bson.ObjectID, error) {
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

// RetireCount counts the ended tasks f selects, those a task not yet
// ended comes after included (RetirePage leaves them out).
func (s *Store) RetireCount(ctx context.Context, f RetireFilter) (int64, error) {
	n, err := s.tasks.CountDocuments(ctx, f.bson())
	if err != nil {
		return 0, fmt.Errorf("count ended tasks: %w", err)
	}
	return n, nil
}
