package den

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// The queue book puts what a pass read in place: a queue that changed is
// replaced where it is, a new queue is added among the served or the
// others, a queue that is gone is removed, one whose serving changed moves;
// the served come first, and the last read of every queue (which the
// housekeeping works with) is never changed.
func TestQueueBookPutsQueuesInPlace(t *testing.T) {
	t.Parallel()
	q := func(name, plugin string) queue.Queue {
		return queue.Queue{ID: bson.NewObjectID(), Name: name, Plugin: plugin, Raw: bson.Raw(name + plugin)}
	}
	a, b, c := q("a", "P"), q("b", "P"), q("c", "Other")
	serves := func(q queue.Queue) bool { return q.Plugin == "P" }
	changed := func(x queue.Queue, plugin string) queue.Queue {
		x.Plugin, x.Raw = plugin, bson.Raw(x.Name+plugin+"!")
		return x
	}
	d, e := q("d", "P"), q("e", "Other")
	for _, tc := range []struct {
		name        string
		fresh       []queue.Queue
		gone        []bson.ObjectID
		want, serve []string
	}{
		{"nothing new", []queue.Queue{a}, nil, []string{"a", "b", "c"}, []string{"a", "b"}},
		{"a changed, served still", []queue.Queue{changed(a, "P")}, nil, []string{"a", "b", "c"}, []string{"a", "b"}},
		{"a new served queue", []queue.Queue{d}, nil, []string{"a", "b", "d", "c"}, []string{"a", "b", "d"}},
		{"a new queue not served", []queue.Queue{e}, nil, []string{"a", "b", "c", "e"}, []string{"a", "b"}},
		{"b gone", nil, []bson.ObjectID{b.ID}, []string{"a", "c"}, []string{"a"}},
		{"a gone that the book never knew", nil, []bson.ObjectID{bson.NewObjectID()}, []string{"a", "b", "c"}, []string{"a", "b"}},
		{"a no longer served", []queue.Queue{changed(a, "Other")}, nil, []string{"b", "a", "c"}, []string{"b"}},
		{"c served now", []queue.Queue{changed(c, "P")}, nil, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			full := []queue.Queue{a, b, c}
			book := queueBook{full: full, served: 2, fullIndex: queue.NewByID(full)}
			book.update(tc.fresh, tc.gone, serves)
			queues, serve, byID := book.current()
			names := func(qs []queue.Queue) []string {
				var out []string
				for _, x := range qs {
					out = append(out, x.Name)
				}
				return out
			}
			if got := names(queues); !slices.Equal(got, tc.want) {
				t.Errorf("queues %v, want %v", got, tc.want)
			}
			if got := names(serve); !slices.Equal(got, tc.serve) {
				t.Errorf("served %v, want %v", got, tc.serve)
			}
			for i := range queues {
				if byID[queues[i].ID] != &queues[i] {
					t.Errorf("the index does not point at queue %s in place", queues[i].Name)
				}
			}
			for _, f := range tc.fresh {
				if x, ok := byID[f.ID]; !ok || string(x.Raw) != string(f.Raw) {
					t.Errorf("queue %s not as read", f.Name)
				}
			}
			if names(book.full)[0] != "a" || book.full[0].Plugin != "P" || len(book.full) != 3 || string(book.full[0].Raw) != "aP" {
				t.Errorf("the last read of every queue changed: %v", names(book.full))
			}
		})
	}
}
