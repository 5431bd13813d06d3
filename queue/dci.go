package queue

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds what the Disbatch web API (den/web/dci) asks of the
// database beyond the operator's command line (queueedit.go, tasklist.go, ...): reading tasks
// and other collections by a filter its client writes, and updates that
// say what they matched and changed, as the Perl web API's answers do.

// SettingPluginLater is the plugin's name in later Disbatch's queue
// documents (Disbatch 4's web API and nodes read and write plugin, the
// protocol constructor). A QueueSettings that sets it writes plugin and
// removes constructor, which den would read first.
const SettingPluginLater = "plugin"

// UpdateResult is what an update matched and what it changed.
type UpdateResult struct {
	Matched, Modified int64
}

// SetNodeLimit sets the maxthreads of the node whose _id is id (when not
// zero) or whose name is name; nil writes null (no limit), as Disbatch's
// web API does. No match is no error: the result says so.
func (s *Store) SetNodeLimit(ctx context.Context, id bson.ObjectID, name string, limit *int) (UpdateResult, error) {
	filter := bson.D{{Key: "node", Value: name}}
	if !id.IsZero() {
		filter = bson.D{{Key: "_id", Value: id}}
	}
	var v any
	if limit != nil {
		v = int32(*limit)
	}
	res, err := s.nodes.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: v}}}})
	if err != nil {
		return UpdateResult{}, fmt.Errorf("set maxthreads of node %s: %w", name, err)
	}
	return UpdateResult{Matched: res.MatchedCount, Modified: res.ModifiedCount}, nil
}

// SearchTasks returns the task documents filter matches, whole, in the
// server's order unless sort says otherwise; skip and limit as find has
// them (limit 0: no limit), projection nil for whole documents. A
// condition on the parameters holds under either name (EitherParams);
// sort and projection name fields as stored.
//
// The filter is whoever searches' own, so the server must stop the find
// when ctx's deadline passes: it is sent as a command, with which the
// driver sends what is left of the deadline as maxTimeMS, as it does
// with CountDocuments. (Collection.Find sends none: the driver leaves
// maxTimeMS out of the commands that return a cursor, DRIVERS-2722.)
func (s *Store) SearchTasks(ctx context.Context, filter, sort, projection bson.D, skip, limit int64) ([]bson.Raw, error) {
	cmd := bson.D{{Key: "find", Value: s.tasks.Name()}, {Key: "filter", Value: EitherParams(filter)}}
	if sort != nil {
		cmd = append(cmd, bson.E{Key: "sort", Value: sort})
	}
	if projection != nil {
		cmd = append(cmd, bson.E{Key: "projection", Value: projection})
	}
	if skip > 0 {
		cmd = append(cmd, bson.E{Key: "skip", Value: skip})
	}
	if limit != 0 {
		cmd = append(cmd, bson.E{Key: "limit", Value: limit})
	}
	cur, err := s.db.RunCommandCursor(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	var out []bson.Raw
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("search tasks: %w", err)
	}
	return out, nil
}

// CountTasksMatching counts the tasks filter matches, a condition on the
// parameters under either name (EitherParams).
func (s *Store) CountTasksMatching(ctx context.Context, filter bson.D) (int64, error) {
	n, err := s.tasks.CountDocuments(ctx, EitherParams(filter))
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	return n, nil
}

// EachDocument calls fn with each document of the database's collection
// coll that filter matches, with only the fields of projection (and _id),
// in the server's order, until fn returns an error.
func (s *Store) EachDocument(ctx context.Context, coll string, filter, projection bson.D, fn func(bson.Raw) error) error {
	opts := options.Find()
	if projection != nil {
		opts.SetProjection(projection)
	}
	cur, err := s.db.Collection(coll).Find(ctx, filter, opts)
	if err != nil {
		return fmt.Errorf("read collection %s: %w", coll, err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if err := fn(cur.Current); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read collection %s: %w", coll, err)
	}
	return nil
}
