package queue_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// A node is quiet when its document has the quiet mark and maxthreads 0;
// one whose maxthreads was set since (den node set) claims again, so it is
// not quiet, though its mark stays until it is resumed.
func TestNodeDocQuiet(t *testing.T) {
	t.Parallel()
	mark := bson.D{{Key: "maxthreads", Value: 6}, {Key: "at", Value: time.Now()}, {Key: "by", Value: "den node quiet (me)"}}
	n := func(limit *int, quiet bool) queue.NodeDoc {
		d := bson.D{{Key: "node", Value: "w1"}}
		if quiet {
			d = append(d, bson.E{Key: "quiet", Value: mark})
		}
		raw, _ := bson.Marshal(d)
		return queue.NodeDoc{Name: "w1", MaxThreads: limit, Raw: raw}
	}
	zero, three := 0, 3
	for _, c := range []struct {
		name  string
		doc   queue.NodeDoc
		quiet bool
	}{
		{"quieted", n(&zero, true), true},
		{"maxthreads set since", n(&three, true), false},
		{"maxthreads removed since", n(nil, true), false},
		{"maxthreads 0, never quieted", n(&zero, false), false},
	} {
		q := c.doc.Quiet()
		if (q != nil) != c.quiet {
			t.Errorf("%s: Quiet() = %+v, want quiet %v", c.name, q, c.quiet)
		}
		if q != nil && (q.Limit() != "6" || q.By != "den node quiet (me)" || q.At.IsZero()) {
			t.Errorf("%s: the mark read as %+v", c.name, *q)
		}
	}
}
