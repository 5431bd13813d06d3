package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// rescueOf matches the update that rescues one of node's tasks (its
// filter names the node), or, with id set, that task's only.
func rescueOf(node string, id *bson.ObjectID) func([]bson.Raw) bool {
	return func(docs []bson.Raw) bool {
		for _, d := range docs {
			q, ok := d.Lookup("q").DocumentOK()
			if !ok {
				continue
			}
			if n, _ := q.Lookup("node").StringValueOK(); n != node {
				continue
			}
			if got, _ := q.Lookup("_id").ObjectIDOK(); id == nil || got == *id {
				return true
			}
		}
		return false
	}
}

// A dead node's tasks are rescued one write each. When those writes
// cannot reach the database, the rescues stop at the first and the
// housekeeping reports its failure once, not one warning per task per
// round (its claims go on: they are not the ones that fail); when the
// server refuses one task's write for what it is, that task is warned
// about once and the others are rescued all the same.
func TestRescuesStopAtAnOutageAndGoOnPastARefusal(t *testing.T) {
	t.Parallel()
	d := dentest.DB(t)
	qid := dentest.Queue(t, d, "unserved", "Not::Here", 0, "fifo", bson.E{Key: "max_retries", Value: 0})
	old := time.Now().Add(-time.Hour)
	dentest.Insert(t, d.Collection("nodes"), bson.D{{Key: "node", Value: "ghost"}, {Key: "timestamp", Value: old}})
	var ids []bson.ObjectID
	for range 8 {
		id := bson.NewObjectID()
		ids = append(ids, id)
		dentest.Insert(t, d.Collection("tasks"), bson.D{{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "node", Value: "ghost"},
			{Key: "mtime", Value: old}, {Key: "parameters", Value: bson.D{}}, {Key: "status", Value: -1}})
	}
	refused := ids[3]
	refuse := dentest.Rule{Command: "update", Collection: "tasks", Fault: dentest.Refused, Rate: 1, Match: rescueOf("ghost", &refused)}
	drop := dentest.Rule{Command: "update", Collection: "tasks", Fault: dentest.DropBefore, Rate: 1, Match: rescueOf("ghost", nil)}
	p := dentest.Faults(t, 1, drop)
	const every = time.Second
	node := startNode(t, p.Client(t).Database(d.Name()), "n", func(c *den.Config) {
		c.URI = p.URI()
		c.DeadNodeAfter = time.Minute
		c.RescueEvery = every
	})
	// Each pass's rescue meets a dropped connection (the driver retries a
	// write once): wait for four passes' worth.
	dentest.Eventually(t, time.Minute, "rescues met dropped connections in several passes", func() bool { return len(p.Injected()) >= 8 })
	if n := node.Logs.FilterMessageSnippet("could not rescue a task").Len(); n != 0 {
		t.Errorf("logged %d warnings about single tasks while the database could not be reached; want none (the pass reports it)", n)
	}
	if n := node.Logs.FilterMessageSnippet("MongoDB failed a housekeeping step").Len(); n != 1 {
		t.Errorf("the housekeeping's failure was logged %d times, want once", n)
	}
	if n := dentest.CountTasks(t, d, bson.D{{Key: "status", Value: -6}}); n != 0 {
		t.Fatalf("%d tasks rescued while every rescue was dropped", n)
	}

	// The database answers again, but refuses one task's rescue.
	p.Set(refuse)
	dentest.Eventually(t, time.Minute, "the other tasks rescued", func() bool {
		return dentest.CountTasks(t, d, bson.D{{Key: "status", Value: -6}}) == int64(len(ids)-1)
	})
	start := len(p.Injected())
	dentest.Eventually(t, time.Minute, "the refused rescue tried again in three more passes", func() bool { return len(p.Injected()) >= start+3 })
	if st := status(t, d, refused); st != -1 {
		t.Errorf("refused task: status %d, want -1 (left as it was)", st)
	}
	warned := node.Logs.FilterMessageSnippet("could not rescue a task").All()
	if len(warned) != 1 || warned[0].ContextMap()["task_id"] != refused.Hex() {
		t.Errorf("warnings about single tasks: %v; want one, naming %s", warned, refused.Hex())
	}
}
