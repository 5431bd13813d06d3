package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// LeasesCollection holds leases: a document per piece of work that one
// node at a time does ({_id: name, holder, until, taken}), taken and
// renewed by a conditional update.
const LeasesCollection = "leases"

// TakeLease takes the lease name for holder until now+ttl, or renews it:
// it succeeds when no node holds it, when holder does, or when its
// holder's time ran out (a node that stopped without releasing it). It
// reports whether holder holds it now, and until when. The times are
// the nodes' clocks: they must agree within far less than ttl.
func (s *Store) TakeLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (until time.Time, held bool, err error) {
	until = now.Add(ttl).Truncate(time.Millisecond)
	coll := s.db.Collection(LeasesCollection)
	filter := bson.D{{Key: "_id", Value: name}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "holder", Value: holder}},
		bson.D{{Key: "until", Value: bson.D{{Key: "$lt", Value: now}}}},
	}}}
	res, err := coll.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "holder", Value: holder}, {Key: "until", Value: until}, {Key: "renewed", Value: now}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return time.Time{}, false, nil // another node holds it
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("take lease %s: %w", name, err)
	}
	return until, res.MatchedCount+res.UpsertedCount > 0, nil
}

// ReleaseLease gives the lease name up, if holder holds it: another node
// may take it at once.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, now time.Time) error {
	_, err := s.db.Collection(LeasesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "holder", Value: holder}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: now.Add(-time.Millisecond)}, {Key: "released", Value: now}}}})
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}
