package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Index is one index the protocol needs.
type Index struct {
	Collection string
	Keys       bson.D
	Unique     bool
	Sparse     bool
	// Partial is the index's partialFilterExpression. On a server that
	// does not implement partial indexes (the development server, FerretDB
	// 1.x, answers NotImplemented), a unique index is made without its
	// filter (see UniqueKeyIndex for why that holds there), and any other
	// goes without the index: the queries it serves still work, scanning
	// as that server always does.
	Partial bson.D
	// Without is what goes without the index, for the warning a node logs
	// when the server refuses to make it.
	Without string
}

// Indexes are the indexes a Disbatch 4 node creates, exactly as the Perl
// node does (same keys, same order, default names), so that den and Perl
// nodes starting on the same database never conflict, and one of den's own:
//   - tasks: the claim's {node, status, queue} with either _id order for
//     fifo/lifo, and {queue, status} for counting;
//   - nodes: node, unique;
//   - tasks.files / tasks.chunks: Disbatch's GridFS;
//   - stats (den's own): {step, t} for the page's charts, {t} for
//     TrimStats;
//   - queues (den's own): {count_todo} for the queues with work, which a
//     node reads every pass (QueuesWithWork): with 80,000 queues, a pass
//     then examines those with work, not every queue.
//   - reports (den's own): {task_id}, which the Demo plugin's report
//     upsert and retention's removal of a task's reports look up (without
//     it each task's report scans every report before it).
//   - rate_limits (den's own): {queue, slot}, which a start of a
//     rate-limited queue takes a slot by (RateLimits.Take), and why reads.
//   - tasks (den's own): {queue, priority desc, _id}, partial on queued
//     tasks that have a priority field: it holds only those, serves the
//     claim steps of a queue with priorities (claimByPriority: above and
//     below 0, fifo from the index, lifo sorting only those tasks) and the
//     pass's query for which queues have them (Priorities.Queues). Tasks
//     without a priority cost it nothing.
//   - tasks (den's own): {unique_key, queue}, unique, partial: holds
//     unique tasks (UniqueKeyIndex).
//   - tasks (den's own): {queue, _id desc} and {status, _id desc}, the
//     views' pages: a queue's tasks, and the tasks of some statuses, the
//     newest first (ListTasks, LastEnded, the census's last failures),
//     and the claimed and running tasks of every queue (RunningAll): each
//     a walk of an index that stops at the page's end, whatever the tasks
//     kept. _id and queue never change, so {queue, _id} costs a write
//     nothing but its insert.
var Indexes = []Index{
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}},
		Without: "claims and the reads of a node's own tasks scan the tasks"},
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}, {Key: "_id", Value: 1}},
		Without: "fifo claims scan and sort the queue's tasks"},
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}, {Key: "_id", Value: -1}},
		Without: "lifo claims scan and sort the queue's tasks"},
	{Collection: TasksCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: "status", Value: 1}},
		Without: "counts (den queue list, the web page, the sweep) scan the tasks"},
	{Collection: NodesCollection, Keys: bson.D{{Key: "node", Value: 1}}, Unique: true,
		Without: "two node documents of one name are not refused; node reads scan the nodes"},
	{Collection: GridFSPrefix + ".files", Keys: bson.D{{Key: "filename", Value: 1}, {Key: "metadata.task_id", Value: 1}},
		Without: "finding a task's output in GridFS scans tasks.files"},
	{Collection: GridFSPrefix + ".chunks", Keys: bson.D{{Key: "files_id", Value: 1}, {Key: "n", Value: 1}}, Unique: true,
		Without: "reading output from GridFS scans tasks.chunks, and a chunk written twice is not refused"},
	// den's own: finds cancelled tasks without scanning. Sparse, so it only
	// holds the tasks someone cancelled.
	{Collection: TasksCollection, Keys: bson.D{{Key: FieldCancel, Value: 1}, {Key: "status", Value: 1}}, Sparse: true,
		Without: "the sweep's look for cancelled tasks scans the tasks"},
	{Collection: StatsCollection, Keys: bson.D{{Key: "step", Value: 1}, {Key: "t", Value: 1}},
		Without: "the web page's charts scan the stats"},
	{Collection: StatsCollection, Keys: bson.D{{Key: "t", Value: 1}},
		Without: "trimming the stats scans them"},
	{Collection: QueuesCollection, Keys: bson.D{{Key: "count_todo", Value: 1}},
		Without: "every pass's read of the queues with work scans every queue"},
	{Collection: ReportsCollection, Keys: bson.D{{Key: "task_id", Value: 1}},
		Without: "each Demo report, and its removal by retention, scans the reports"},
	{Collection: RateLimitsCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: "slot", Value: 1}},
		Without: "each start of a rate-limited queue scans rate_limits"},
	{Collection: TasksCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: FieldPriority, Value: -1}, {Key: "_id", Value: 1}},
		Partial: bson.D{{Key: "status", Value: StatusQueued}, {Key: FieldPriority, Value: bson.D{{Key: "$exists", Value: true}}}},
		Without: "claims in a queue with priorities scan and sort its queued tasks"},
	// den's own: holds unique tasks (unique.go).
	UniqueKeyIndex,
	// den's own: the views' pages (see above).
	{Collection: TasksCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: "_id", Value: -1}}},
	{Collection: TasksCollection, Keys: bson.D{{Key: "status", Value: 1}, {Key: "_id", Value: -1}}},
}

// Name is the index's default name, as MongoDB (and the Perl node) makes it.
func (ix Index) Name() string {
	parts := make([]string, 0, 2*len(ix.Keys))
	for _, k := range ix.Keys {
		parts = append(parts, k.Key, fmt.Sprint(k.Value))
	}
	return strings.Join(parts, "_")
}

// IndexReport is what EnsureIndexes could not do as asked, for a node to
// log once.
type IndexReport struct {
	// Conflicts are the indexes that exist with other options (the node
	// still works, perhaps more slowly), or that tasks inserted before
	// break (unfinished tasks sharing a unique_key).
	Conflicts []string
	// Failed are the indexes the server refused to make, each with why
	// and what goes without it.
	Failed []IndexFailure
	// Keys are the tasks whose unique_key was too long for its index,
	// taken out of its way before it was made (TakeOutOversized).
	Keys OversizedKeys
}

// IndexFailure is an index the server refused to make.
type IndexFailure struct {
	// Index is the index as collection.name.
	Index string
	Err   error
	// Without is what goes without it (Index.Without).
	Without string
}

// EnsureIndexes creates the protocol's indexes in the database of s (a node
// does it when it starts). It is idempotent: an index that already exists
// is left alone. It is a function, not one of the node's store methods: it
// sets the database up rather than doing the node's work in it.
//
// Each index is created by a command of its own, and only when it is not
// listed already: the embedded development server (FerretDB 1.x) drops the
// connection when one createIndexes names several indexes that all exist.
// One the server refuses is reported in the IndexReport (Failed, with what
// goes without it), and the others are still made; one that exists with
// other options is reported in Conflicts. Before anything is made, when
// the index that holds unique keys is not there yet, the tasks whose key
// is too long for it are taken out of its way (TakeOutOversized). The
// error is for what stops the whole: the indexes cannot be listed, or the
// server cannot be reached (network error, timeout: the caller tries
// again).
func (s *Store) EnsureIndexes(ctx context.Context) (IndexReport, error) {
	var r IndexReport
	existing := map[string]map[string]bool{}
	names := func(coll string) (map[string]bool, error) {
		if n, ok := existing[coll]; ok {
			return n, nil
		}
		n, err := indexNames(ctx, s.db.Collection(coll))
		existing[coll] = n
		return n, err
	}
	tasks, err := names(UniqueKeyIndex.Collection)
	if err != nil {
		return r, err
	}
	if !tasks[UniqueKeyIndex.Name()] {
		if r.Keys, err = s.TakeOutOversized(ctx); err != nil {
			if unreachable(ctx, err) {
				return r, err
			}
			r.Failed = append(r.Failed, IndexFailure{Index: UniqueKeyIndex.Collection + "." + UniqueKeyIndex.Name(), Err: err, Without: UniqueKeyIndex.Without})
		}
	}
	for _, ix := range Indexes {
		have, err := names(ix.Collection)
		if err != nil {
			return r, err
		}
		if have[ix.Name()] {
			continue
		}
		err = createIndexFreeing(ctx, s.db, ix)
		var ce mongo.CommandError
		switch {
		case err == nil:
		case errors.As(err, &ce) && (ce.Code == 85 || ce.Code == 86): // IndexOptionsConflict, IndexKeySpecsConflict
			r.Conflicts = append(r.Conflicts, fmt.Sprintf("%s.%s: %s", ix.Collection, ix.Name(), ce.Message))
		case IsDuplicateKey(err): // tasks inserted before share a unique_key: no unique tasks until they end
			r.Conflicts = append(r.Conflicts, fmt.Sprintf("%s.%s: %v", ix.Collection, ix.Name(), err))
		case unreachable(ctx, err):
			return r, fmt.Errorf("create index %s on %s: %w", ix.Name(), ix.Collection, err)
		default:
			r.Failed = append(r.Failed, IndexFailure{Index: ix.Collection + "." + ix.Name(), Err: err, Without: ix.Without})
		}
	}
	return r, nil
}

// unreachable reports whether err says the server was not reached, or
// the call was stopped, rather than that it refused.
func unreachable(ctx context.Context, err error) bool {
	return mongo.IsNetworkError(err) || mongo.IsTimeout(err) || ctx.Err() != nil
}

func indexNames(ctx context.Context, coll *mongo.Collection) (map[string]bool, error) {
	names := map[string]bool{}
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		// A collection that does not exist yet has no indexes; MongoDB
		// answers NamespaceNotFound (26) for it, FerretDB an empty list.
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 26 {
			return names, nil
		}
		return nil, fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if name, ok := cur.Current.Lookup("name").StringValueOK(); ok {
			names[name] = true
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	return names, nil
}

// createIndex creates one index. A partial index the server does not
// implement (FerretDB 1.x: NotImplemented, code 238) is created without its
// filter, which is only right where missing fields are not indexed (see
// UniqueKeyIndex); MongoDB has had partial indexes since 3.2.
func createIndex(ctx context.Context, db *mongo.Database, ix Index) error {
	opts := options.Index()
	switch {
	case ix.Unique:
		opts.SetUnique(true)
	case ix.Sparse:
		opts.SetSparse(true)
	}
	coll := db.Collection(ix.Collection)
	if len(ix.Partial) > 0 {
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix.Keys, Options: options.Index().SetUnique(ix.Unique).SetPartialFilterExpression(ix.Partial)})
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != 238 {
			return err
		}
		if !ix.Unique {
			return nil // goes without it (Index.Partial)
		}
	}
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix.Keys, Options: opts})
	return err
}

// createIndexFreeing creates an index as createIndex does; when it is
// UniqueKeyIndex and tasks that have ended share a key (inserted before
// den held keys), it frees their keys first and tries once more.
func createIndexFreeing(ctx context.Context, db *mongo.Database, ix Index) error {
	err := createIndex(ctx, db, ix)
	if !IsDuplicateKey(err) || ix.Name() != UniqueKeyIndex.Name() || ix.Collection != UniqueKeyIndex.Collection {
		return err
	}
	if _, ferr := newStore(db).FreeEnded(ctx, bson.ObjectID{}, "", time.Now()); ferr != nil {
		return err
	}
	return createIndex(ctx, db, ix)
}
