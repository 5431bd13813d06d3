package queue

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// What kind of server a store talks to decides one thing: how a fifo or
// lifo claim is asked (candidates.go). It is read once, from buildInfo,
// which every MongoDB-compatible server answers without authorization:
// FerretDB's reply names its own version (ferretdbVersion).
const (
	serverUnknown int32 = iota
	serverMongoDB
	serverFerretDB
)

// claimsByCandidates reports whether fifo and lifo claims go by candidates:
// on FerretDB, whose sort is not served by an index.
func (s *Store) claimsByCandidates(ctx context.Context) (bool, error) {
	switch s.server.Load() {
	case serverMongoDB:
		return false, nil
	case serverFerretDB:
		return true, nil
	}
	raw, err := s.db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	var se mongo.ServerError
	switch {
	case err != nil && errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err):
		// A server that refuses buildInfo is not FerretDB, which answers
		// it: the protocol's claim is right for it.
		s.server.CompareAndSwap(serverUnknown, serverMongoDB)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("ask the server what it is (buildInfo): %w", err)
	}
	if _, err := raw.LookupErr("ferretdbVersion"); err == nil {
		s.server.CompareAndSwap(serverUnknown, serverFerretDB)
		return true, nil
	}
	s.server.CompareAndSwap(serverUnknown, serverMongoDB)
	return false, nil
}

// statusConditions returns the conditions on status that together select
// the tasks of the given statuses, one query each: {$in: statuses} for
// MongoDB, whose index serves it; for FerretDB each status by itself, an
// equality its postgresql handler pushes down to an index (it pushes
// down no $in, and would decode every task the rest of the filter leaves,
// finished ones included, for each query of a pass).
func (s *Store) statusConditions(ctx context.Context, statuses ...int) ([]any, error) {
	ferret, err := s.claimsByCandidates(ctx)
	if err != nil {
		return nil, err
	}
	if !ferret || len(statuses) == 1 {
		if len(statuses) == 1 {
			return []any{statuses[0]}, nil
		}
		in := make(bson.A, len(statuses))
		for i, st := range statuses {
			in[i] = st
		}
		return []any{bson.D{{Key: "$in", Value: in}}}, nil
	}
	out := make([]any, len(statuses))
	for i, st := range statuses {
		out[i] = st
	}
	return out, nil
}
