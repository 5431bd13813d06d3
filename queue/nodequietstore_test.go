package queue_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Quieting a node sets its maxthreads to 0 and keeps what it had (none,
// or a limit) in quiet with when and by whom; resuming puts back exactly
// that and removes the mark. Quieting a quiet node, or resuming one that
// is not, changes nothing (PauseAlready); a name no node has is
// ErrNoNode, and no document is made for it.
func TestNodeQuietAndResume(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	stores := queue.NewStore(db)
	ctx := dentest.Context(t)
	quiet := queue.NewStore(db)
	now := time.Now().Truncate(time.Millisecond)
	for _, c := range []struct {
		name  string
		limit *int // nil: none
	}{
		{"limited", ptr(4)},
		{"unlimited", nil},
		{"zero", ptr(0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := stores.WriteNodeTimestamp(ctx, c.name, now); err != nil {
				t.Fatal(err)
			}
			if c.limit != nil {
				if err := stores.SetNodeMaxThreads(ctx, c.name, c.limit); err != nil {
					t.Fatal(err)
				}
			}
			doc := func() bson.Raw {
				t.Helper()
				return must(db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: c.name}}).Raw())
			}
			if got, err := quiet.ResumeNode(ctx, c.name); err != nil || got != queue.PauseAlready {
				t.Errorf("resume a node that is not quiet: %v, %v; want PauseAlready", got, err)
			}

			if got, err := quiet.QuietNode(ctx, c.name, "den node quiet (me)", now); err != nil || got != queue.PauseDone {
				t.Fatalf("quiet: %v, %v", got, err)
			}
			raw := doc()
			if v, ok := raw.Lookup("maxthreads").AsInt64OK(); !ok || v != 0 {
				t.Errorf("a quiet node's maxthreads: %v, want 0", raw.Lookup("maxthreads"))
			}
			mark := queue.QuietOf(raw)
			if mark == nil || !mark.At.Equal(now) || mark.By != "den node quiet (me)" {
				t.Fatalf("quiet mark %+v of %v", mark, raw)
			}
			want := "none"
			if c.limit != nil {
				want = map[int]string{4: "4", 0: "0"}[*c.limit]
			}
			if mark.Limit() != want {
				t.Errorf("the mark keeps maxthreads %s, want %s", mark.Limit(), want)
			}
			nodes := must(stores.Nodes(ctx))
			for _, n := range nodes {
				if n.Name == c.name && n.Quiet() == nil {
					t.Errorf("the node read by operators is not quiet: %v", n.Raw)
				}
			}

			if got, err := quiet.QuietNode(ctx, c.name, "someone else", now.Add(time.Minute)); err != nil || got != queue.PauseAlready {
				t.Errorf("quiet a quiet node: %v, %v; want PauseAlready", got, err)
			}
			if m := queue.QuietOf(doc()); m == nil || m.By != "den node quiet (me)" || m.Limit() != want {
				t.Errorf("quieting again changed the mark: %+v", m)
			}

			if got, err := quiet.ResumeNode(ctx, c.name); err != nil || got != queue.PauseDone {
				t.Fatalf("resume: %v, %v", got, err)
			}
			raw = doc()
			if raw.Lookup(queue.FieldQuiet).Type != 0 {
				t.Errorf("a resumed node keeps its mark: %v", raw)
			}
			v := raw.Lookup("maxthreads")
			if c.limit == nil && v.Type != 0 {
				t.Errorf("a node without a limit resumed with maxthreads %v", v)
			}
			if n, ok := v.AsInt64OK(); c.limit != nil && (!ok || n != int64(*c.limit)) {
				t.Errorf("a node with limit %d resumed with maxthreads %v", *c.limit, v)
			}
		})
	}

	for _, do := range []func() (queue.PauseOutcome, error){
		func() (queue.PauseOutcome, error) { return quiet.QuietNode(ctx, "nobody", "me", now) },
		func() (queue.PauseOutcome, error) { return quiet.ResumeNode(ctx, "nobody") },
	} {
		if got, err := do(); !errors.Is(err, queue.ErrNoNode) || got != queue.PauseAlready {
			t.Errorf("quiet or resume a node there is not: %v, %v; want ErrNoNode", got, err)
		}
	}
	if n := dentest.Count(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "nobody"}}); n != 0 {
		t.Errorf("a document was made for a node there is not")
	}
}
