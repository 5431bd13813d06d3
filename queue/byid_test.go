package queue

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A task's queue and what it requests come from the queues it was read
// with: its own requested_resources first, else its queue's, else none.
func TestByIDAndRequested(t *testing.T) {
	t.Parallel()
	own, inherited := Resources{CPUs: 2}, Resources{MemoryMB: 512}
	qs := []Queue{{ID: bson.NewObjectID(), Name: "plain"}, {ID: bson.NewObjectID(), Name: "asks"}}
	qs[1].Control.Requested = &inherited
	byID := NewByID(qs)
	if got := IDs(qs); len(got) != 2 || got[0] != qs[0].ID || got[1] != qs[1].ID {
		t.Fatalf("IDs = %v, want the queues' _ids in order", got)
	}
	cases := []struct {
		name string
		task Task
		want Resources
	}{
		{"its own request", Task{Queue: qs[1].ID, Control: Control{Requested: &own}}, own},
		{"its queue's request", Task{Queue: qs[1].ID}, inherited},
		{"nothing asked", Task{Queue: qs[0].ID}, Resources{}},
		{"its queue unread, its own request", Task{Queue: bson.NewObjectID(), Control: Control{Requested: &own}}, own},
		{"its queue unread", Task{Queue: bson.NewObjectID()}, Resources{}},
	}
	for _, c := range cases {
		if got := byID.Request(c.task); got != c.want {
			t.Errorf("%s: Request = %+v, want %+v", c.name, got, c.want)
		}
	}
	if q := byID.Of(Task{Queue: qs[1].ID}); q != &qs[1] {
		t.Errorf("Of points to %p, want the read queue %p", q, &qs[1])
	}
	if q := byID.Of(Task{Queue: bson.NewObjectID()}); q != nil {
		t.Errorf("Of a task of an unread queue = %+v, want nil", q)
	}
}
