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
			store := queue.NewStore(db)
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

			has, err := store.QueuesWithPriority(ctx, []bson.ObjectID{qid, other})
			if err != nil || !has[qid] || has[other] {
				t.Fatalf("queues with priorities: %v %v, want only %s", has, err, qid.Hex())
			}
			for i, w := range want {
				c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: tc.sort, Node: "n", At: time.Now(), Priorities: true})
				if err != nil || !ok {
					t.Fatalf("claim %d: ok=%v err=%v", i, ok, err)
				}
				if c.ID != w {
					t.Fatalf("claim %d took %s, want %s (order %v)", i, c.ID.Hex(), w.Hex(), want)
				}
			}
			if _, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: tc.sort, Node: "n", At: time.Now(), Priorities: true}); ok || err != nil {
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
		fixed   any
		ok      bool
	}{
		{nil, false, nil, false},
		{int32(-3), false, nil, false},
		{int64(1 << 60), false, nil, false},
		{12.0, false, nil, false},
		{2.5, false, nil, false},
		{" 7 ", true, int64(7), true},
		{"-2", true, int64(-2), true},
		{"2.5", true, 2.5, true},
		{"high", true, nil, false},
		{"NaN", true, nil, false},
		{true, true, nil, false},
		{bson.D{{Key: "a", Value: 1}}, true, nil, false},
	} {
		p, fixed, ok := queue.PriorityProblem(val(tc.v))
		if (p != "") != tc.problem || fixed != tc.fixed || ok != tc.ok {
			t.Errorf("PriorityProblem(%v) = %q, %d, %v", tc.v, p, fixed, ok)
		}
	}
}

// A queued task's priority that is not a number is the sweep's: a number
// written as a string is irregular and rewritten as the number
// (Normalize), anything else is malformed, failed with the reason; a
// number of any type, a fraction among them, is left as it is.
func TestSweepFindsPrioritiesThatAreNotNumbers(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "P", 10, "fifo")
	ids := map[string]bson.ObjectID{}
	for name, p := range map[string]any{
		"int": 5, "long": int64(-7), "fraction": 2.5, "null": nil,
		"string": " 10", "word": "urgent", "boolean": true, "document": bson.D{{Key: "p", Value: 1}},
	} {
		ids[name] = dentest.TaskWith(t, db, qid, bson.D{}, bson.E{Key: queue.FieldPriority, Value: p})
	}
	tasks, err := store.Irregular(ctx, []bson.ObjectID{qid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := map[bson.ObjectID]queue.Task{}
	for _, task := range tasks {
		if task.IsIrregular() {
			found[task.ID] = task
		}
	}
	for name, want := range map[string]struct{ irregular, malformed bool }{
		"int": {false, false}, "long": {false, false}, "fraction": {false, false}, "null": {false, false},
		"string": {true, false}, "word": {true, true}, "boolean": {true, true}, "document": {true, true},
	} {
		task, irregular := found[ids[name]]
		if irregular != want.irregular || (len(task.Malformed()) > 0) != want.malformed {
			t.Errorf("priority %s: irregular %v, malformed %v; want %v, %v", name, irregular, task.Malformed(), want.irregular, want.malformed)
		}
	}
	if m := found[ids["word"]].Malformed(); len(m) != 1 || m[0] != `priority is "urgent" (string); it must be an integer, default 0 (a higher one runs first)` {
		t.Errorf("the reason for priority \"urgent\" is %q", m)
	}
	if ok, err := store.Normalize(ctx, found[ids["string"]]); !ok || err != nil {
		t.Fatalf("normalize: %v %v", ok, err)
	}
	if v := dentest.Task(t, db, ids["string"]).Lookup(queue.FieldPriority); v.Type != bson.TypeInt64 || v.Int64() != 10 {
		t.Errorf("priority \" 10\" was rewritten as %v, want the number 10", v)
	}
}
