package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}}},
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}, {Key: "_id", Value: 1}}},
	{Collection: TasksCollection, Keys: bson.D{{Key: "node", Value: 1}, {Key: "status", Value: 1}, {Key: "queue", Value: 1}, {Key: "_id", Value: -1}}},
	{Collection: TasksCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: "status", Value: 1}}},
	{Collection: NodesCollection, Keys: bson.D{{Key: "node", Value: 1}}, Unique: true},
	{Collection: GridFSPrefix + ".files", Keys: bson.D{{Key: "filename", Value: 1}, {Key: "metadata.task_id", Value: 1}}},
	{Collection: GridFSPrefix + ".chunks", Keys: bson.D{{Key: "files_id", Value: 1}, {Key: "n", Value: 1}}, Unique: true},
	// den's own: finds cancelled tasks without scanning. Sparse, so it only
	// holds the tasks someone cancelled.
	{Collection: TasksCollection, Keys: bson.D{{Key: FieldCancel, Value: 1}, {Key: "status", Value: 1}}, Sparse: true},
	{Collection: StatsCollection, Keys: bson.D{{Key: "step", Value: 1}, {Key: "t", Value: 1}}},
	{Collection: StatsCollection, Keys: bson.D{{Key: "t", Value: 1}}},
	{Collection: QueuesCollection, Keys: bson.D{{Key: "count_todo", Value: 1}}},
	{Collection: ReportsCollection, Keys: bson.D{{Key: "task_id", Value: 1}}},
	{Collection: RateLimitsCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: "slot", Value: 1}}},
	{Collection: TasksCollection, Keys: bson.D{{Key: "queue", Value: 1}, {Key: FieldPriority, Value: -1}, {Key: "_id", Value: 1}},
		Partial: bson.D{{Key: "status", Value: StatusQueued}, {Key: FieldPriority, Value: bson.D{{Key: "$exists", Value: true}}}}},
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

// EnsureIndexes creates the protocol's indexes in the database of s (a node
// does it when it starts). It is idempotent: an index that already exists
// is left alone. It is a function, not one of the node's store methods: it
// sets the database up rather than doing the node's work in it.
//
// Each index is created by a command of its own, and only when it is not
// listed already: the embedded development server (FerretDB 1.x) drops the
// connection when one createIndexes names several indexes that all exist.
// An index that exists with other options is reported in conflicts (the
// node still works, perhaps more slowly) and not treated as an error.
func EnsureIndexes(ctx context.Context, s *NodeStore) (conflicts []string, err error) {
	existing := map[string]map[string]bool{}
	for _, ix := range Indexes {
		names, ok := existing[ix.Collection]
		if !ok {
			names, err = indexNames(ctx, s.db.Collection(ix.Collection))
			if err != nil {
				return nil, err
			}
			existing[ix.Collection] = names
		}
		if names[ix.Name()] {
			continue
		}
		err := createIndexFreeing(ctx, s.db, ix)
		var ce mongo.CommandError
		if errors.As(err, &ce) && (ce.Code == 85 || ce.Code == 86) { // IndexOptionsConflict, IndexKeySpecsConflict
			conflicts = append(conflicts, fmt.Sprintf("%s.%s: %s", ix.Collection, ix.Name(), ce.Message))
			continue
		}
		if IsDuplicateKey(err) { // tasks inserted before share a unique_key: no unique tasks until they end
			conflicts = append(conflicts, fmt.Sprintf("%s.%s: %v", ix.Collection, ix.Name(), err))
			continue
		}
		if err != nil {
			return conflicts, fmt.Errorf("create index %s on %s: %w", ix.Name(), ix.Collection, err)
		}
	}
	return conflicts, nil
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
	if _, ferr := NewUniqueKeys(db).FreeEnded(ctx, bson.ObjectID{}, ""); ferr != nil {
		return err
	}
	return createIndex(ctx, db, ix)
}
