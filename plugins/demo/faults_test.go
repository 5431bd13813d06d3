package demo_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/demo"
)

// A report whose write meets a failover's fault is written again, and
// once: the task succeeds with exactly one report, even when the first
// write landed and only its reply was lost.
func TestReportOnceUnderFaults(t *testing.T) {
	for _, f := range []dentest.Fault{dentest.LoseReply, dentest.NotWritablePrimary, dentest.DropBefore} {
		t.Run(f.String(), func(t *testing.T) {
			db := dentest.DB(t)
			p := dentest.Faults(t, 1, dentest.Rule{Collection: demo.ReportsCollection, Fault: f, Nth: 1})
			qid := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
			id := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}})[0]
			dentest.Claim(t, db, id, "n")
			faulted := p.Client(t).Database(db.Name())
			r := &worker.Executor{Spec: runner.Spec{Node: "n", Task: id.Hex(), Plugin: demo.Name, GFS: "auto"}, DB: faulted, Plugins: plugins.Default(), Log: zaptest.NewLogger(t)}
			if err := r.Run(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			if len(p.Injected()) != 1 {
				t.Fatalf("injected %v, want one fault on the report's write", p.Injected())
			}
			if st := dentest.Task(t, db, id).Lookup("status").AsInt64(); st != 1 {
				t.Fatalf("task status %d, want 1 (its stderr: %s)", st, dentest.Task(t, db, id).Lookup("stderr"))
			}
			n, err := db.Collection(demo.ReportsCollection).CountDocuments(dentest.Context(t), bson.D{{Key: "task_id", Value: id}})
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d reports, want 1", n)
			}
		})
	}
}
