package queue_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// On the development server fifo and lifo claims go by candidates
// (candidates.go), and keep the protocol's order and atomicity: a den
// store and a Perl node's claim (the protocol's own sorted
// findOneAndUpdate, run beside it) together take every task once, more
// tasks than one list of candidates holds, and each takes them in its
// queue's order. On MongoDB the store makes the protocol's claim, and the
// same holds.
func TestClaimsByCandidatesKeepOrderAndAtomicity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sort string
		less func(a, b bson.ObjectID) bool
	}{
		{queue.SortFIFO, func(a, b bson.ObjectID) bool { return a.Hex() < b.Hex() }},
		{queue.SortLIFO, func(a, b bson.ObjectID) bool { return a.Hex() > b.Hex() }},
	} {
		t.Run(tc.sort, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			ctx := dentest.Context(t)
			store := queue.NewStore(db)
			if dentest.EmbeddedServer() {
				by, err := queue.ClaimsByCandidates(ctx, store)
				if err != nil || !by {
					t.Fatalf("on the development server, claims by candidates = %v (%v), want true", by, err)
				}
			}
			qid := dentest.Queue(t, db, "q", "P", 10, tc.sort)
			n := queue.CandidateBatch + queue.CandidateBatch/2
			docs := make([]any, n)
			for i := range docs {
				docs[i] = bson.D{{Key: "_id", Value: bson.NewObjectIDFromTimestamp(time.Unix(1_700_000_000+int64(i), 0))},
					{Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusQueued}, {Key: "node", Value: queue.Unclaimed},
					{Key: "parameters", Value: bson.D{}}}
			}
			dentest.Insert(t, db.Collection("tasks"), docs...)

			seen := claimBeside(t, db, store, qid, tc.sort, tc.less)
			if len(seen) != n {
				t.Fatalf("%d tasks claimed, want all %d", len(seen), n)
			}
			var dens []string
			for _, who := range seen {
				dens = append(dens, who)
			}
			if !slices.Contains(dens, "den") {
				t.Errorf("den claimed none of %d tasks", n)
			}
		})
	}
}

// claimBeside claims every task of queue qid with store and, once den has
// claimed one, with the protocol's own sorted findOneAndUpdate (a Perl
// node) beside it, checking that no task is claimed twice and that each
// claimer takes its tasks in order (less); it returns who claimed each.
//
// The Perl node starts once den has claimed a task: started together,
// its one command a claim can take every task while den's first list of
// candidates is read (seen in CI on a loaded machine), and the test
// would check no claim of den's.
func claimBeside(t *testing.T, db *mongo.Database, store *queue.Store, qid bson.ObjectID, sort string, less func(a, b bson.ObjectID) bool) map[bson.ObjectID]string {
	ctx := dentest.Context(t)
	var mu sync.Mutex
	seen := map[bson.ObjectID]string{}
	take := func(who string, id bson.ObjectID, prev *bson.ObjectID) {
		mu.Lock()
		defer mu.Unlock()
		if other, dup := seen[id]; dup {
			t.Errorf("task %s claimed by %s and %s", id.Hex(), other, who)
		}
		seen[id] = who
		if !prev.IsZero() && !less(*prev, id) {
			t.Errorf("%s claimed %s after %s: not in %s order", who, id.Hex(), prev.Hex(), sort)
		}
		*prev = id
	}
	var wg sync.WaitGroup
	wg.Add(2)
	denFirst := make(chan struct{})
	go func() { // den
		defer wg.Done()
		var prev bson.ObjectID
		defer func() {
			if prev.IsZero() {
				close(denFirst)
			}
		}()
		for {
			c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: sort, Node: "den", At: time.Now()})
			if err != nil {
				t.Error(err)
				return
			}
			if !ok {
				return
			}
			first := prev.IsZero()
			take("den", c.ID, &prev)
			if first {
				close(denFirst)
			}
		}
	}()
	go func() { // a Perl node: the protocol's claim
		defer wg.Done()
		<-denFirst
		var prev bson.ObjectID
		for {
			var got struct {
				ID bson.ObjectID `bson:"_id"`
			}
			err := db.Collection("tasks").FindOneAndUpdate(ctx,
				bson.D{{Key: "node", Value: -1}, {Key: "status", Value: -2}, {Key: "queue", Value: qid}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "node", Value: "perl"}, {Key: "status", Value: -1}, {Key: "mtime", Value: time.Now()}}}},
				options.FindOneAndUpdate().SetSort(queue.ClaimSort(sort)).SetReturnDocument(options.After)).Decode(&got)
			if errors.Is(err, mongo.ErrNoDocuments) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			take("perl", got.ID, &prev)
		}
	}()
	wg.Wait()
	return seen
}

// A task put back in its queue by this store (a released claim) comes
// before the candidates already listed, as the protocol's claim would take
// it: the store reads its list again.
func TestReleasedTaskClaimedFirst(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 10, queue.SortFIFO)
	ids := dentest.Tasks(t, db, qid, params(5)...)
	claim := func() bson.ObjectID {
		t.Helper()
		c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: "n", At: time.Now()})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		return c.ID
	}
	first := claim()
	if first != ids[0] {
		t.Fatalf("first claim %s, want the oldest %s", first.Hex(), ids[0].Hex())
	}
	if ok, err := store.Release(ctx, first, "n", time.Now()); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if again := claim(); again != first {
		t.Fatalf("after releasing the oldest task, the claim took %s, want it (%s) again", again.Hex(), first.Hex())
	}
}
