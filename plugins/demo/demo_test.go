package demo_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/demo"
)

func TestMain(m *testing.M) { dentest.Main(m, nil) }

// The demo plugin's bulk commands: 1 MiB stays in the task document, 15 MiB
// plus a line does not fit and goes to GridFS; each task writes its report.
func TestBulkOutput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		commands       string
		stdout, stderr int
		gridfs         bool
	}{
		{"1", 1 << 20, 0, false},
		{"A", 0, 1 << 20, false},
		{"ea", 15<<20 + len("This is command 'a' for apple.\n"), 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.commands, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			qid := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
			id := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: tc.commands}, {Key: "counter", Value: 7}})[0]
			dentest.Claim(t, db, id, "n")
			r := &worker.Executor{Spec: runner.Spec{Node: "n", Task: id.Hex(), Plugin: demo.Name, GFS: "auto"}, DB: db, Plugins: plugins.Default(), Log: zaptest.NewLogger(t)}
			if err := r.Run(dentest.Context(t)); err != nil {
				t.Fatal(err)
			}
			raw := dentest.Task(t, db, id)
			size := func(field string) (int, bool) {
				v := raw.Lookup(field)
				if oid, ok := v.ObjectIDOK(); ok {
					b, err := gridfs.NewBucket(db, "tasks").ReadFile(dentest.Context(t), oid)
					if err != nil {
						t.Fatal(err)
					}
					return len(b), true
				}
				return len(v.StringValue()), false
			}
			out, inFile := size("stdout")
			errLen, _ := size("stderr")
			if out != tc.stdout || errLen != tc.stderr || inFile != tc.gridfs {
				t.Fatalf("stdout %d stderr %d gridfs %v; want %d %d %v", out, errLen, inFile, tc.stdout, tc.stderr, tc.gridfs)
			}
			var report bson.M
			if err := db.Collection("reports").FindOne(dentest.Context(t), bson.D{{Key: "task_id", Value: id}}).Decode(&report); err != nil {
				t.Fatal(err)
			}
			if report["status"] != "SUCCESS" || report["counter"] != int32(7) || report["queue_id"] != qid || !strings.Contains(tc.commands, report["commands"].(string)[:1]) {
				t.Fatalf("report %v", report)
			}
		})
	}
}
