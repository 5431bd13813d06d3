package queue_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A claim with Priorities takes the highest priority first, a task
// without one (or null, or 0) as priority 0, above negative ones and
// below positive ones, and within one priority the queue's order; one
// that is not a number counts as 0 until the sweep deals with it. Queues
// know whether they have priorities by one query.
func TestClaimByPriority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sort    string
		reverse bool
	}{{"fifo", false}, {"lifo", true}} {
		t.Run(tc.sort, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			ctx := dentest.Context(t)
			store := queue.NewStores(db)
			qid := dentest.Queue(t, db, "q", "P", 1, tc.sort)
			other := dentest.Queue(t, db, "other", "P", 1, tc.sort)
			dentest.Tasks(t, db, other, params(2)...)
			task := func(i int, prio ...any) bson.ObjectID {
				var extra []bson.E
				if len(prio) > 0 {
					extra = append(extra, bson.E{Key: queue.FieldPriority, Value: prio[0]})
				}
				return dentest.TaskWith(t, db, qid, bson.D{{Key: "i", Value: i}}, extra...)
			}
			// In insertion order: names say what each is.
			none1 := task(0)
			neg1 := task(1, int32(-1))
			zero := task(2, 0.0)
			p10a := task(3, int64(10))
			null := task(4, nil)
			p5 := task(5, int32(5))
			p10b := task(6, 10.0)
			str := task(7, "high")
			neg5 := task(8, int32(-5))
			none2 := task(9)
			// Within one priority, the queue's order.
			pair := func(a, b bson.ObjectID) []bson.ObjectID {
				if tc.reverse {
					return []bson.ObjectID{b, a}
				}
				return []bson.ObjectID{a, b}
			}
			var want []bson.ObjectID
			want = append(want, pair(p10a, p10b)...)
			want = append(want, p5)
			zeros := []bson.ObjectID{none1, zero, null, str, none2}
			if tc.reverse {
				zeros = []bson.ObjectID{none2, str, null, zero, none1}
			}
			want = append(want, zeros...)
			want = append(want, neg1, neg5)

			has, err := queue.PrioritiesOf(store.Node).Queues(ctx, []bson.ObjectID{qid, other})
			if err != nil || !has[qid] || has[other] {
				t.Fatalf("queues with priorities: %v %v, want only %s", has, err, qid.Hex())
			}
			for i, w := range want {
				c, ok, err := store.Node.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: tc.sort, Node: "n", At: time.Now(), Priorities: true})
				if err != nil || !ok {
					t.Fatalf("claim %d: ok=%v err=%v", i, ok, err)
				}
				if c.ID != w {
					t.Fatalf("claim %d took %s, want %s (order %v)", i, c.ID.Hex(), w.Hex(), want)
				}
			}
			if _, ok, err := store.Node.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: tc.sort, Node: "n", At: time.Now(), Priorities: true}); ok || err != nil {
				t.Fatalf("claim of an empty queue: ok=%v err=%v", ok, err)
			}
		})
	}
}

func TestPriorityProblem(t *testing.T) {
	t.Parallel()
	val := func(v any) bson.RawValue {
		if v == nil {
			return bson.RawValue{Type: bson.TypeNull}
		}
		typ, data, err := bson.MarshalValue(v)
		if err != nil {
			t.Fatal(err)
		}
		return bson.RawValue{Type: typ, Value: data}
	}
	for _, tc := range []struct {
		v       any
		problem bool
		fixed   int64
		ok      bool
	}{
		{nil, false, 0, false},
		{int32(-3), false, 0, false},
		{int64(1 << 40), false, 0, false},
		{12.0, false, 0, false},
		{2.5, true, 0, false},
		{1e300, true, 0, false},
		{int64(1 << 60), true, 0, false},
		{" 7 ", true, 7, true},
		{"-2", true, -2, true},
		{"high", true, 0, false},
		{true, true, 0, false},
		{bson.D{{Key: "a", Value: 1}}, true, 0, false},
	} {
		p, fixed, ok := queue.PriorityProblem(val(tc.v))
		if (p != "") != tc.problem || fixed != tc.fixed || ok != tc.ok {
			t.Errorf("PriorityProblem(%v) = %q, %d, %v", tc.v, p, fixed, ok)
		}
	}
}
