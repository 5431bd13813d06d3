package claim

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/queue"
)

// What the claimer tells the pass's steps: whether every node's tasks
// must be counted before the claims (NeedsCount), and whether the probe
// may look for work (MayProbe).
func TestNeedsCountAndMayProbe(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	todo := int64(3)
	global := queue.Queue{ID: bson.NewObjectID(), Global: true, CountTodo: &todo}
	plain := queue.Queue{ID: bson.NewObjectID(), CountTodo: &todo}
	zero, one := 0, 1
	for _, c := range []struct {
		name            string
		set             func(cl *Claimer)
		serve           []queue.Queue
		count, mayProbe bool
	}{
		{"nothing read, never counted", func(*Claimer) {}, []queue.Queue{plain}, true, false},
		{"counted, no queue-wide limit", func(cl *Claimer) {
			cl.pass.running = queue.Running{}
			cl.ReadPass([]queue.Queue{plain}, nil, "", queue.NewByID([]queue.Queue{plain}))
		}, []queue.Queue{plain}, false, true},
		{"counted, a queue-wide limit in play", func(cl *Claimer) {
			cl.pass.running = queue.Running{}
			cl.ReadPass([]queue.Queue{global}, nil, "", queue.NewByID([]queue.Queue{global}))
		}, []queue.Queue{global}, true, true},
		{"claims paused", func(cl *Claimer) {
			cl.ReadPass(nil, nil, "", nil)
			cl.pause.until = now.Add(time.Second)
		}, nil, true, false},
		{"pause over", func(cl *Claimer) {
			cl.ReadPass(nil, nil, "", nil)
			cl.pause.until = now
		}, nil, true, true},
		{"node full", func(cl *Claimer) { cl.ReadPass(nil, &zero, "", nil) }, nil, true, false},
		{"node has a slot", func(cl *Claimer) { cl.ReadPass(nil, &one, "", nil) }, nil, true, true},
		{"node's one slot held", func(cl *Claimer) {
			cl.ReadPass(nil, &one, "", nil)
			cl.Held.Claimed(bson.NewObjectID(), plain.ID, queue.Resources{})
		}, nil, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl := &Claimer{Env: &base.Env{Clock: queue.NewClock(func() time.Time { return now })}, Held: held.New(),
				seen: map[bson.ObjectID]bool{}, empty: map[bson.ObjectID]counts{}, aside: map[bson.ObjectID]bool{}}
			c.set(cl)
			if got := cl.NeedsCount(c.serve); got != c.count {
				t.Errorf("NeedsCount = %v, want %v", got, c.count)
			}
			if got := cl.MayProbe(); got != c.mayProbe {
				t.Errorf("MayProbe = %v, want %v", got, c.mayProbe)
			}
		})
	}
}
