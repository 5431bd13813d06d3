package queue_test

import (
	"testing"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// BenchmarkClaim measures claims per second of one claimer: the claim is a
// findOneAndUpdate with a sort, served by the {node, status, queue, _id}
// index on MongoDB. (On the embedded server every command is serialized
// and scans the collection, so numbers there are a floor, not a target.)
func BenchmarkClaim(b *testing.B) {
	db := dentest.DB(b)
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(dentest.Context(b)); err != nil {
		b.Fatal(err)
	}
	qid := dentest.Queue(b, db, "bench", "P", 1, "fifo")
	q := queue.Queue{ID: qid, Sort: queue.SortFIFO}
	dentest.Tasks(b, db, qid, params(b.N)...)
	b.ResetTimer()
	for range b.N {
		if _, ok, err := claimOne(dentest.Context(b), store, q, "bench"); err != nil || !ok {
			b.Fatalf("claim: %v %v", ok, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
