package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// CensusCollection holds the census: every queue's tasks counted by
// status, and the last tasks that failed, made when a view asks for counts
// older than it accepts (CensusTaker.Take) and kept for every viewer after
// it: den web's pages, den status, den queue list, the DCI's queue list.
// A view then reads what the queues cost (a document per queue with
// tasks), not what the tasks cost; one count of every task is made at
// most once per the views' accepted age, however many look, and none
// while nobody looks. Nodes never make it: an idle database costs nothing
// for it.
//
// One document per queue id that has tasks ({_id: queue, s: {"STATUS":
// n, ...}, other: n}: a queue whose document is gone keeps its counts
// here, with its tasks), and the census's own ({_id: "census", at, took,
// by, failures}). Disbatch nodes neither read nor write it.
const CensusCollection = "census"

// censusID is the _id of the census's own document.
const censusID = "census"

// censusLease is the lease (LeasesCollection) a process holds while it
// counts, so that two viewers that find the census old count once.
const censusLease = "census"

// DefaultCountsAge is how old the census a view shows may be unless
// configured (web.counts_age): at most one count of every task every 10
// s, however many look.
const DefaultCountsAge = 10 * time.Second

// CensusFailures is how many of the last failed or orphaned tasks the
// census keeps (by _id, the newest first).
const CensusFailures = 10

// Census is every queue's tasks counted by status at At, as one count
// made them (Took long, by By), with the last tasks that failed or were
// orphaned then (the newest first). At is zero when no census was made.
type Census struct {
	At       time.Time
	Took     time.Duration
	By       string
	Queues   map[bson.ObjectID]StatusCounts
	Failures []bson.ObjectID
}

// Total is how many tasks the census counted.
func (c *Census) Total() int64 {
	var n int64
	for _, q := range c.Queues {
		n += q.Total()
	}
	return n
}

// Age is how old the census is at now.
func (c *Census) Age(now time.Time) time.Duration { return now.Sub(c.At) }

// ReadCensus reads the census as it was last made (At zero: never), the
// counts of only the given queues when some are given. It costs a read of
// a document per queue with tasks (of only, with only), never of a task.
func (s *Store) ReadCensus(ctx context.Context, only ...bson.ObjectID) (*Census, error) {
	coll := s.db.Collection(CensusCollection)
	c := &Census{Queues: map[bson.ObjectID]StatusCounts{}}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: censusID}}).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("read the census: %w", err)
	}
	c.At, _ = raw.Lookup("at").TimeOK()
	if ms, ok := intValue(raw.Lookup("took_ms")); ok {
		c.Took = time.Duration(ms) * time.Millisecond
	}
	c.By, _ = raw.Lookup("by").StringValueOK()
	if arr, ok := raw.Lookup("failures").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			if id, ok := v.ObjectIDOK(); ok {
				c.Failures = append(c.Failures, id)
			}
		}
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}}
	if len(only) > 0 {
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: only}}}}
	}
	cur, err := coll.Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("read the census: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if id, counts, ok := decodeQueueCensus(cur.Current); ok {
			c.Queues[id] = counts
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read the census: %w", err)
	}
	return c, nil
}

// decodeQueueCensus reads one queue's document of the census.
func decodeQueueCensus(raw bson.Raw) (bson.ObjectID, StatusCounts, bool) {
	id, ok := raw.Lookup("_id").ObjectIDOK()
	if !ok {
		return id, StatusCounts{}, false
	}
	c := StatusCounts{ByStatus: map[int]int64{}}
	if d, ok := raw.Lookup("s").DocumentOK(); ok {
		elems, _ := d.Elements()
		for _, e := range elems {
			st, err := strconv.Atoi(e.Key())
			n, ok := intValue(e.Value())
			if err == nil && ok {
				c.ByStatus[st] = n
			}
		}
	}
	c.Other, _ = intValue(raw.Lookup("other"))
	return id, c, true
}

// queueCensusDoc is one queue's document of the census.
func queueCensusDoc(id bson.ObjectID, c StatusCounts) bson.D {
	s := bson.D{}
	for st, n := range c.ByStatus {
		s = append(s, bson.E{Key: strconv.Itoa(st), Value: n})
	}
	return bson.D{{Key: "_id", Value: id}, {Key: "s", Value: s}, {Key: "other", Value: c.Other}}
}

// sameCounts reports whether two queues' counts are the same.
func sameCounts(a, b StatusCounts) bool {
	if a.Other != b.Other || len(a.ByStatus) != len(b.ByStatus) {
		return false
	}
	for st, n := range a.ByStatus {
		if m, ok := b.ByStatus[st]; !ok || m != n {
			return false
		}
	}
	return true
}

// CensusTaker makes the census when a view asks for one younger than the
// stored one (Take), once in this process however many ask at once, and
// once among processes (a lease): a viewer that finds another counting
// waits for its census. By names the process in the census (den web,
// den status).
type CensusTaker struct {
	Store OperatorStore
	By    string
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu sync.Mutex
}

func (ct *CensusTaker) now() time.Time {
	if ct.Now != nil {
		return ct.Now()
	}
	return time.Now()
}

// Take returns a census no older than maxAge: the stored one when it is
// young enough, else a new one, made here or by another process that was
// counting. If counting fails, or ctx ends first, it returns the stored
// census however old (its At says so), with the error only when there is
// none at all. A census of every task is one aggregation over the
// {queue, status} index (on the development server, answered by
// PostgreSQL) and one find of the last failures.
//
// With only, the census's counts are those of the given queues alone
// (what a queue's page reads): a census young enough is read for them only.
func (ct *CensusTaker) Take(ctx context.Context, maxAge time.Duration, only ...bson.ObjectID) (*Census, error) {
	asked := ct.now()
	c, err := ct.Store.ReadCensus(ctx, only...)
	if err != nil {
		return nil, err
	}
	if !c.At.IsZero() && asked.Sub(c.At) <= maxAge {
		return c, nil
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	// Another caller of this process may have counted meanwhile.
	if again, err := ct.Store.ReadCensus(ctx, only...); err == nil && !again.At.IsZero() && !again.At.Before(asked) {
		return again, nil
	}
	fresh, err := ct.count(ctx, asked)
	if err != nil {
		if c.At.IsZero() {
			return nil, err
		}
		return c, nil // the stored one, however old: its At says how old
	}
	return fresh, nil
}

// count makes a new census, or waits for the one another process is
// making, and returns it.
func (ct *CensusTaker) count(ctx context.Context, asked time.Time) (*Census, error) {
	holder := ct.By
	nodes := ct.Store
	for {
		_, held, err := nodes.TakeLease(ctx, censusLease, holder, ct.now(), time.Minute)
		if err != nil {
			return nil, err
		}
		if held {
			break
		}
		// Another process counts: its census is the one to take.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		c, err := ct.Store.ReadCensus(ctx)
		if err != nil {
			return nil, err
		}
		if !c.At.IsZero() && !c.At.Before(asked) {
			return c, nil
		}
	}
	defer nodes.ReleaseLease(context.WithoutCancel(ctx), censusLease, holder, ct.now())
	return ct.Store.MakeCensus(ctx, ct.By, ct.now)
}

// MakeCensus counts every queue's tasks by status, and finds the last
// failed ones, and stores the census (only what changed since the one
// stored: a queue whose counts are the same is not written). now is the
// clock. Callers hold the census lease (CensusTaker).
func (s *Store) MakeCensus(ctx context.Context, by string, now func() time.Time) (*Census, error) {
	began := now()
	counts, err := s.TaskCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("make the census: %w", err)
	}
	failures, err := s.lastFailures(ctx)
	if err != nil {
		return nil, fmt.Errorf("make the census: %w", err)
	}
	was, err := s.ReadCensus(ctx)
	if err != nil {
		return nil, err
	}
	var writes []mongo.WriteModel
	for id, c := range counts {
		if old, ok := was.Queues[id]; ok && sameCounts(old, c) {
			continue
		}
		writes = append(writes, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetReplacement(queueCensusDoc(id, c)).SetUpsert(true))
	}
	for id := range was.Queues {
		if _, ok := counts[id]; !ok {
			writes = append(writes, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}))
		}
	}
	coll := s.db.Collection(CensusCollection)
	if len(writes) > 0 {
		if _, err := coll.BulkWrite(ctx, writes, options.BulkWrite().SetOrdered(false)); err != nil {
			return nil, fmt.Errorf("store the census: %w", err)
		}
	}
	c := &Census{At: began, Took: now().Sub(began), By: by, Queues: counts, Failures: failures}
	ids := bson.A{}
	for _, id := range failures {
		ids = append(ids, id)
	}
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: censusID}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "at", Value: c.At}, {Key: "took_ms", Value: c.Took.Milliseconds()}, {Key: "by", Value: by}, {Key: "failures", Value: ids},
	}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return nil, fmt.Errorf("store the census: %w", err)
	}
	return c, nil
}

// lastFailures are the _ids of the last CensusFailures tasks that failed
// (status 2 and up) or were orphaned (-6), the newest (by _id) first.
func (s *Store) lastFailures(ctx context.Context) ([]bson.ObjectID, error) {
	cur, err := s.tasks.Find(ctx, failedFilter(), options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).
		SetLimit(CensusFailures).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("find the last failed tasks: %w", err)
	}
	defer cur.Close(ctx)
	var out []bson.ObjectID
	for cur.Next(ctx) {
		if id, ok := cur.Current.Lookup("_id").ObjectIDOK(); ok {
			out = append(out, id)
		}
	}
	return out, cur.Err()
}

// failedFilter selects the tasks that failed (status 2 and up, a whole
// number) or were orphaned (-6).
func failedFilter() bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: StatusFailed}, {Key: "$lte", Value: math.MaxInt32}}}},
		bson.D{{Key: "status", Value: StatusOrphaned}},
	}}}
}

// TasksByID reads the tasks ids names, the newest (by _id) first, without
// their parameters, output and history: the census's last failures, as a
// view shows them. It is one find by _id; those gone are left out.
func (s *Store) TasksByID(ctx context.Context, ids []bson.ObjectID) ([]Task, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.collect(ctx, "read tasks by id", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(int64(len(ids))).SetProjection(bson.D{
			{Key: "parameters", Value: 0}, {Key: "params", Value: 0}, {Key: "stdout", Value: 0}, {Key: FieldHistory, Value: 0}}))
}
