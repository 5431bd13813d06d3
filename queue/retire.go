package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/gridfs"
)

// Retiring ended tasks: an operator (den task purge, den task archive)
// removes the tasks that ended before some time, in batches.
//
//   - Only ended tasks are removed: finished (status 1 and up), cancelled
//     (-5) and orphaned (-6). Queued, claimed, running and held tasks stay.
//   - A task that an unended task comes after (its after) stays, whatever
//     its age: removing it would leave the dependent waiting for a task
//     that no longer exists.
//   - Delete removes the task and its output files from GridFS (every
//     run's: the files whose metadata.task_id is the task, and those its
//     stdout and stderr name). Archive moves the task, unchanged, into
//     tasks_archive, a collection of the same shape, and keeps its files:
//     an archived task is kept to be read, output included.
//   - The queue's counts follow: count_total less each removed task, and
//     count_todo less each removed task with a status of 0 or less
//     (cancelled and orphaned tasks stay counted in it until removed).
//   - Each removal is conditional on the status the task was read with.

// ArchiveCollection holds archived tasks, as they were in tasks.
const ArchiveCollection = "tasks_archive"

// RetireMode is what becomes of a retired task.
type RetireMode string

const (
	RetireDelete  RetireMode = "delete"
	RetireArchive RetireMode = "archive"
)

// RetireFilter selects the ended tasks to retire: the list filter (queue,
// status, node, outcome; Limit bounds one batch) and EndedBefore, their
// mtime (when they ended) before it; zero: any age.
type RetireFilter struct {
	TaskFilter
	EndedBefore time.Time
	// AfterID pages through a selection: only tasks with a larger _id.
	AfterID bson.ObjectID
	// MinStatus, when positive, selects finished tasks of this status or
	// above (2: every finished task that did not succeed).
	MinStatus int
	// CreatedBefore, when set, selects tasks created (their _id's time)
	// before it: with EndedBefore, it bounds the scan of the _id index.
	CreatedBefore time.Time
}

// endedStatuses is the filter part that selects ended tasks.
func endedStatuses() bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusSucceeded}}}},
		bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusCancelled, StatusOrphaned}}}}},
	}}}
}

func (f RetireFilter) bson() bson.D {
	and := bson.A{endedStatuses()}
	if !f.EndedBefore.IsZero() {
		and = append(and, bson.D{{Key: "mtime", Value: bson.D{{Key: "$lt", Value: f.EndedBefore}}}})
	}
	if !f.AfterID.IsZero() {
		and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: f.AfterID}}}})
	}
	if f.MinStatus > 0 {
		and = append(and, bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: f.MinStatus}}}})
	}
	if !f.CreatedBefore.IsZero() {
		and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: bson.NewObjectIDFromTimestamp(f.CreatedBefore)}}}})
	}
	return append(f.TaskFilter.bson(), bson.E{Key: "$and", Value: and})
}

// retireFields are what retiring reads of a task.
var retireFields = bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "status", Value: 1}, {Key: "node", Value: 1},
	{Key: "mtime", Value: 1}, {Key: FieldOutcome, Value: 1}, {Key: StreamStdout, Value: 1}, {Key: StreamStderr, Value: 1}, {Key: FieldHasDependents, Value: 1}}

// RetireCandidates returns up to f.Limit ended tasks matching f, oldest
// first, without those an unended task comes after.
func (s *Store) RetireCandidates(ctx context.Context, f RetireFilter) ([]Task, error) {
	tasks, _, _, err := s.RetirePage(ctx, f)
	return tasks, err
}

// RetirePage is RetireCandidates that also returns how many tasks it
// read, and the _id of the last (zero when none), those left out
// included: the next page starts after last (AfterID), and a page that
// read fewer than f.Limit was the last.
func (s *Store) RetirePage(ctx context.Context, f RetireFilter) (tasks []Task, read int, last bson.ObjectID, err error) {
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetProjection(retireFields)
	if f.Limit > 0 {
		opts.SetLimit(f.Limit)
	}
	tasks, err = s.collect(ctx, "find tasks to retire", f.bson(), opts)
	if err != nil {
		return nil, 0, last, err
	}
	read = len(tasks)
	if read > 0 {
		last = tasks[read-1].ID
	}
	needed, err := s.neededByDependents(ctx, tasks)
	if err != nil {
		return nil, read, last, err
	}
	out := tasks[:0]
	for _, t := range tasks {
		if !needed[t.ID] {
			out = append(out, t)
		}
	}
	return out, read, last, nil
}

// neededByDependents returns which of tasks an unended task comes after.
// Only tasks marked has_dependents are looked up.
func (s *Store) neededByDependents(ctx context.Context, tasks []Task) (map[bson.ObjectID]bool, error) {
	var ids []bson.ObjectID
	for _, t := range tasks {
		if b, ok := t.Raw.Lookup(FieldHasDependents).BooleanOK(); ok && b {
			ids = append(ids, t.ID)
		}
	}
	needed := map[bson.ObjectID]bool{}
	if len(ids) == 0 {
		return needed, nil
	}
	cur, err := s.tasks.Find(ctx, bson.D{{Key: FieldAfter, Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "status", Value: bson.D{{Key: "$lte", Value: StatusRunning}, {Key: "$nin", Value: bson.A{StatusCancelled, StatusOrphaned}}}}},
		options.Find().SetProjection(bson.D{{Key: FieldAfter, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find the dependents of %d tasks: %w", len(ids), err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		after, _ := idList(cur.Current.Lookup(FieldAfter))
		for _, id := range after {
			needed[id] = true
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("find the dependents of %d tasks: %w", len(ids), err)
	}
	return needed, nil
}

// Retired is what one RetireTasks call did.
type Retired struct {
	Tasks int64 // removed from tasks (deleted or archived)
	Files int64 // GridFS files deleted
}

// RetireTasks removes tasks (as RetireCandidates returned them) by mode,
// and lowers their queues' counts. A task whose status changed since it
// was read stays. The tasks go in one delete per queue and status they
// were read with: a batch of any size costs a few commands.
func (s *Store) RetireTasks(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error) {
	var done Retired
	if len(tasks) == 0 {
		return done, nil
	}
	switch mode {
	case RetireArchive:
		if err := s.archive(ctx, tasks); err != nil {
			return done, err
		}
	case RetireDelete:
		ids := make([]bson.ObjectID, 0, len(tasks))
		var files []bson.ObjectID
		for _, t := range tasks {
			ids = append(ids, t.ID)
			for _, stream := range []string{StreamStdout, StreamStderr} {
				if id, ok := t.Raw.Lookup(stream).ObjectIDOK(); ok {
					files = append(files, id)
				}
			}
		}
		n, err := gridfs.NewBucket(s.db, GridFSPrefix).DeleteTaskFiles(ctx, ids, files)
		done.Files = n
		if err != nil {
			return done, fmt.Errorf("retire %d tasks: %w", len(tasks), err)
		}
	default:
		return done, fmt.Errorf("retire tasks: %q is neither delete nor archive", mode)
	}
	// One delete per queue and status: each is conditional on the status
	// the tasks were read with, and its count is what leaves the queue.
	type group struct {
		queue  bson.ObjectID
		status int
	}
	var order []group
	ids := map[group][]bson.ObjectID{}
	for _, t := range tasks {
		g := group{t.Queue, t.Status}
		if _, ok := ids[g]; !ok {
			order = append(order, g)
		}
		ids[g] = append(ids[g], t.ID)
	}
	type change struct{ total, todo int64 }
	byQueue := map[bson.ObjectID]*change{}
	// deleteErr ends the deletes; what they removed before is counted
	// before it is returned.
	var deleteErr error
	for _, g := range order {
		res, err := s.tasks.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids[g]}}}, {Key: "status", Value: g.status}})
		if err != nil {
			deleteErr = fmt.Errorf("retire %d tasks of status %d: %w", len(ids[g]), g.status, err)
			break
		}
		if res.DeletedCount == 0 {
			continue
		}
		done.Tasks += res.DeletedCount
		c := byQueue[g.queue]
		if c == nil {
			c = &change{}
			byQueue[g.queue] = c
		}
		c.total += res.DeletedCount
		if g.status <= 0 {
			c.todo += res.DeletedCount
		}
	}
	for q, c := range byQueue {
		inc := bson.D{{Key: "count_total", Value: -c.total}}
		if c.todo > 0 {
			inc = append(inc, bson.E{Key: "count_todo", Value: -c.todo})
		}
		if _, err := s.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: q}}, bson.D{{Key: "$inc", Value: inc}}); err != nil {
			return done, fmt.Errorf("count %d retired tasks in queue %s: %w (run den counts fix)", c.total, q.Hex(), err)
		}
	}
	return done, deleteErr
}

// archive copies the whole documents of tasks into tasks_archive. A task
// already there (an archive interrupted after its copy) is not copied
// twice.
func (s *Store) archive(ctx context.Context, tasks []Task) error {
	ids := make([]bson.ObjectID, 0, len(tasks))
	for _, t := range tasks {
		ids = append(ids, t.ID)
	}
	cur, err := s.tasks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return fmt.Errorf("read %d tasks to archive: %w", len(ids), err)
	}
	var docs []any
	for cur.Next(ctx) {
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return fmt.Errorf("read %d tasks to archive: %w", len(ids), err)
	}
	if len(docs) == 0 {
		return nil
	}
	_, err = s.db.Collection(ArchiveCollection).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var bw mongo.BulkWriteException
	if errors.As(err, &bw) && bw.WriteConcernError == nil {
		for _, we := range bw.WriteErrors {
			if !mongo.IsDuplicateKeyError(we) {
				return fmt.Errorf("archive %d tasks: %w", len(docs), err)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive %d tasks: %w", len(docs), err)
	}
	return nil
}

// ArchivedTask reads a task from tasks_archive; nil when it is not there.
func (s *Store) ArchivedTask(ctx context.Context, id bson.ObjectID) (*Task, error) {
	doc, err := s.db.Collection(ArchiveCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read archived task %s: %w", id.Hex(), err)
	}
	t, err := DecodeTask(doc)
	if err != nil {
		return nil, fmt.Errorf("read archived task %s: %w", id.Hex(), err)
	}
	return &t, nil
}
