package held

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// What the node holds never falls below what it runs: the races between a
// read of its tasks and its runners' exits all err on the side of holding
// too much (a count too low would break maxthreads).
func TestHeldTasksNeverUndercount(t *testing.T) {
	t.Parallel()
	q := bson.NewObjectID()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	task := func(id bson.ObjectID) queue.Task { return queue.Task{ID: id, Queue: q} }
	a, b, c := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	tests := []struct {
		name string
		run  func(o *Tasks)
		want int
	}{
		{"a claim holds at once", func(o *Tasks) { o.Claimed(a, q, queue.Resources{}) }, 1},
		{"a runner that already recorded its result holds until it exits", func(o *Tasks) {
			o.Claimed(a, q, queue.Resources{})
			o.Read(nil, t0, noReq) // the database no longer shows it running
		}, 1},
		{"an exit lets go", func(o *Tasks) {
			o.Claimed(a, q, queue.Resources{})
			o.Done(a, t0)
		}, 0},
		{"a read sent before an exit does not hold the task again", func(o *Tasks) {
			o.Claimed(a, q, queue.Resources{})
			o.Done(a, t0.Add(time.Second))
			o.Read([]queue.Task{task(a)}, t0, noReq)
		}, 0},
		{"a read sent after an exit holds a task still shown running (a dead runner not yet rescued)", func(o *Tasks) {
			o.Claimed(a, q, queue.Resources{})
			o.Done(a, t0)
			o.Read([]queue.Task{task(a)}, t0.Add(time.Second), noReq)
		}, 1},
		{"tasks of runners of an earlier node process are held as read", func(o *Tasks) {
			o.Read([]queue.Task{task(b), task(c)}, t0, noReq)
		}, 2},
		{"and let go when a read no longer shows them", func(o *Tasks) {
			o.Read([]queue.Task{task(b), task(c)}, t0, noReq)
			o.Read([]queue.Task{task(c)}, t0.Add(time.Second), noReq)
		}, 1},
		{"a task claimed again after its exit is held", func(o *Tasks) {
			o.Claimed(a, q, queue.Resources{})
			o.Done(a, t0)
			o.Claimed(a, q, queue.Resources{}) // retried, and claimed by this node again
			o.Read([]queue.Task{task(a)}, t0.Add(-time.Second), noReq)
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := New()
			tt.run(o)
			byQueue, total := o.Counts()
			if got := byQueue[q]; got != tt.want {
				t.Fatalf("holds %d, want %d", got, tt.want)
			}
			if total != tt.want {
				t.Fatalf("holds %d in all, want %d", total, tt.want)
			}
		})
	}
}

func noReq(queue.Task) queue.Resources { return queue.Resources{} }
