package queue_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// The branches den takes only on MongoDB, run on the development server,
// which answers the same commands (atomically, behind den's proxy) but
// makes den take other branches when it is left to tell what it is: the
// protocol's own sorted claim instead of claims by candidates, and one
// {$in: [...]} condition on status where the development server gets one
// query per status. queue.ClaimProtocol makes a store take MongoDB's
// branches whatever the server; each read is compared with what a store
// left to detect the server answers on the same tasks. On a real MongoDB
// (DEN_TEST_MONGODB_URI) both stores take the same branches, and the test
// still holds. What no test here can run is in docs/development.md; the
// claims are TestMongoDBClaimsOnTheDevelopmentServer.
func TestMongoDBBranchesOnTheDevelopmentServer(t *testing.T) {
	t.Parallel()
	ctx := dentest.Context(t)
	db := dentest.DB(t)
	detected, protocol := queue.NewStore(db), queue.NewStore(db)
	queue.ClaimProtocol(protocol)
	if byCandidates, err := queue.ClaimsByCandidates(ctx, protocol); err != nil || byCandidates {
		t.Fatalf("the protocol store claims by candidates (%v, %v): ClaimProtocol did not take", byCandidates, err)
	}

	// Tasks of every state, on two nodes, for the reads that ask for
	// several statuses at once.
	qid := dentest.Queue(t, db, "reads", "P", 10, "fifo")
	tasks := dentest.Tasks(t, db, qid, params(8)...)
	now := time.Now()
	set := func(id bson.ObjectID, status int, node string) {
		t.Helper()
		if _, err := db.Collection(queue.TasksCollection).UpdateByID(ctx, id, bson.D{{Key: "$set", Value: bson.D{
			{Key: "status", Value: status}, {Key: "node", Value: node}, {Key: "mtime", Value: now}}}}); err != nil {
			t.Fatal(err)
		}
	}
	set(tasks[0], queue.StatusClaimed, "a")
	set(tasks[1], queue.StatusRunning, "a")
	set(tasks[2], queue.StatusRunning, "b")
	set(tasks[3], queue.StatusSucceeded, "a")
	set(tasks[4], queue.StatusFailed, "b")
	ids := func(ts []queue.Task) []bson.ObjectID {
		out := make([]bson.ObjectID, len(ts))
		for i, task := range ts {
			out[i] = task.ID
		}
		slices.SortFunc(out, func(a, b bson.ObjectID) int { return bytes.Compare(a[:], b[:]) })
		return out
	}
	for _, c := range []struct {
		name string
		read func(s *queue.Store) (any, error)
		want any
	}{
		{"Held", func(s *queue.Store) (any, error) {
			ts, err := s.Held(ctx, "a", false)
			return ids(ts), err
		}, []bson.ObjectID{tasks[0], tasks[1]}},
		{"NodeTasks", func(s *queue.Store) (any, error) {
			ts, err := s.NodeTasks(ctx, "b")
			return ids(ts), err
		}, []bson.ObjectID{tasks[2]}},
		{"RunningAll", func(s *queue.Store) (any, error) {
			r, err := s.RunningAll(ctx)
			return [3]int{r.Queue(qid), r.Node(qid, "a"), r.Node(qid, "b")}, err
		}, [3]int{3, 2, 1}},
		{"RunningInQueue", func(s *queue.Store) (any, error) { return s.RunningInQueue(ctx, qid) }, int64(3)},
		{"ClaimingNodes", func(s *queue.Store) (any, error) {
			vs, err := s.ClaimingNodes(ctx)
			var names []string
			for _, v := range vs {
				names = append(names, v.StringValue())
			}
			slices.Sort(names)
			return names, err
		}, []string{"a", "b"}},
		{"Irregular", func(s *queue.Store) (any, error) {
			ts, err := s.Irregular(ctx, []bson.ObjectID{qid}, nil)
			return ids(ts), err
		}, []bson.ObjectID(nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range []struct {
				name  string
				store *queue.Store
			}{{"as MongoDB", protocol}, {"as detected", detected}} {
				got, err := c.read(s.store)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if !equal(got, c.want) {
					t.Errorf("%s: %v, want %v", s.name, got, c.want)
				}
			}
		})
	}
}

// equal compares the results of TestMongoDBBranchesOnTheDevelopmentServer's reads.
func equal(a, b any) bool {
	switch a := a.(type) {
	case []bson.ObjectID:
		b, _ := b.([]bson.ObjectID)
		return slices.Equal(a, b)
	case []string:
		b, _ := b.([]string)
		return slices.Equal(a, b)
	}
	return a == b
}

// MongoDB's fifo and lifo claim (the protocol's sorted findOneAndUpdate),
// on the development server: concurrent claimers take each task once, and
// one claimer takes them in the queue's order.
func TestMongoDBClaimsOnTheDevelopmentServer(t *testing.T) {
	t.Parallel()
	ctx := dentest.Context(t)
	db := dentest.DB(t)
	protocol := queue.NewStore(db)
	queue.ClaimProtocol(protocol)
	for _, sort := range []string{"fifo", "lifo"} {
		qid := dentest.Queue(t, db, "claims-"+sort, "P", 10, sort)
		ids := dentest.Tasks(t, db, qid, params(40)...)
		q := mustQueue(t, protocol, qid)
		// Four claimers at once take each task once.
		var mu sync.Mutex
		seen := map[bson.ObjectID]string{}
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() {
				node := string(rune('a' + c))
				for {
					id, ok, err := claimOne(ctx, protocol, q, node)
					if err != nil || !ok {
						if err != nil {
							t.Error(err)
						}
						return
					}
					mu.Lock()
					if prev, dup := seen[id]; dup {
						t.Errorf("%s: task %s claimed by %s and %s", sort, id.Hex(), prev, node)
					}
					seen[id] = node
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != len(ids) {
			t.Errorf("%s: %d of %d tasks claimed", sort, len(seen), len(ids))
		}
		// One claimer takes them in the queue's order.
		qid = dentest.Queue(t, db, "order-"+sort, "P", 10, sort)
		ids = dentest.Tasks(t, db, qid, params(5)...)
		q = mustQueue(t, protocol, qid)
		var order []bson.ObjectID
		for {
			id, ok, err := claimOne(ctx, protocol, q, "a")
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			order = append(order, id)
		}
		want := slices.Clone(ids)
		if sort == "lifo" {
			slices.Reverse(want)
		}
		if !slices.Equal(order, want) {
			t.Errorf("%s: claimed in the order %v, want %v", sort, order, want)
		}
	}
}
