package gridfs

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DeleteTaskFiles removes every file of the given tasks: the files whose
// metadata.task_id is one of tasks, and the files named in also (a task's
// stdout and stderr ids, for files written without that metadata). Chunks
// go first, then the files, so that an interruption leaves files that a
// second call finds again, never chunks that nothing names. It returns how
// many files it removed.
func (b *Bucket) DeleteTaskFiles(ctx context.Context, tasks []bson.ObjectID, also []bson.ObjectID) (int64, error) {
	if len(tasks) == 0 && len(also) == 0 {
		return 0, nil
	}
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "metadata.task_id", Value: bson.D{{Key: "$in", Value: nonNil(tasks)}}}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: nonNil(also)}}}},
	}}}
	cur, err := b.files.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("gridfs: find the files of %d tasks: %w", len(tasks), err)
	}
	var ids []any
	for cur.Next(ctx) {
		ids = append(ids, decodeFileID(cur.Current))
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return 0, fmt.Errorf("gridfs: find the files of %d tasks: %w", len(tasks), err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := b.chunks.DeleteMany(ctx, bson.D{{Key: "files_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
		return 0, fmt.Errorf("gridfs: delete the chunks of %d files: %w", len(ids), err)
	}
	res, err := b.files.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return 0, fmt.Errorf("gridfs: delete %d files: %w", len(ids), err)
	}
	return res.DeletedCount, nil
}

// nonNil is ids, or an empty array: $in needs an array.
func nonNil(ids []bson.ObjectID) []bson.ObjectID {
	if ids == nil {
		return []bson.ObjectID{}
	}
	return ids
}
