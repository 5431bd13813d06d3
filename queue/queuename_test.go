package queue_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Queue names (issue 41, finding 8): a name of 24 hexadecimal digits
// (what den reads as a queue's id: the queue named with another
// queue's id made that queue unreachable by its id) and a name over
// queue.MaxQueueName bytes are refused, at creation and at a rename; a
// name at the bound goes in.
func TestQueueNamesRefused(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	create := func(name string) error {
		_, err := s.CreateQueueWith(ctx, queue.QueueSettings{Set: bson.D{{Key: queue.SettingName, Value: name}, {Key: queue.SettingPlugin, Value: "P"}}})
		return err
	}
	if err := create("a"); err != nil {
		t.Fatal(err)
	}
	a, _, err := s.FindQueue(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, name string }{
		{"another queue's id", a.ID.Hex()},
		{"another queue's id in capitals", strings.ToUpper(a.ID.Hex())},
		{"24 hex digits, no queue's id", "0123456789abcdef01234567"},
		{"100,000 bytes", strings.Repeat("n", 100_000)},
		{"one byte over the bound", strings.Repeat("n", 201)},
		{"not UTF-8", "q\xff"},
	} {
		rename := func(name string) error {
			return s.UpdateQueue(ctx, a.ID, queue.QueueSettings{Set: bson.D{{Key: queue.SettingName, Value: name}}})
		}
		if err := rename(c.name); err == nil {
			t.Errorf("queue a renamed with %s", c.what)
			if err := rename("a"); err != nil {
				t.Fatal(err)
			}
		}
		if err := create(c.name); err == nil {
			t.Errorf("a queue named with %s was created", c.what)
		} else {
			t.Logf("%s: %.120v", c.what, err)
		}
	}
	for _, name := range []string{strings.Repeat("n", 200), strings.Repeat("é", 100), "0123456789abcdef0123456", "0123456789abcdef012345678", "0123456789abcdef0123456g"} {
		if err := create(name); err != nil {
			t.Errorf("a queue named %q: %v", name, err)
		}
	}
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 6 {
		t.Errorf("%d queues, want 6", n)
	}
}

// A ref that is a queue's id finds that queue, whatever other queue a
// writer named with it; a queue a writer named with 24 hex digits that
// are no queue's id is still found by its name.
func TestFindQueueByIDFirst(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	a := dentest.Queue(t, db, "a", "P", 1, "fifo")
	forged := dentest.Queue(t, db, a.Hex(), "P", 1, "fifo")
	hexName := dentest.Queue(t, db, "0123456789abcdef01234567", "P", 1, "fifo")
	for _, c := range []struct {
		ref  string
		want bson.ObjectID
	}{{a.Hex(), a}, {forged.Hex(), forged}, {"a", a}, {"0123456789abcdef01234567", hexName}} {
		q, _, err := s.FindQueue(ctx, c.ref)
		if err != nil || q.ID != c.want {
			t.Errorf("FindQueue(%q) = %s, %v; want %s", c.ref, q.ID.Hex(), err, c.want.Hex())
		}
	}
}
