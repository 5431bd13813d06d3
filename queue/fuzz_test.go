package queue_test

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// oddTasks reads the seed documents of testdata/odd-tasks.jsonl (Extended
// JSON, one per line) as BSON.
func oddTasks(tb testing.TB) [][]byte {
	tb.Helper()
	f, err := os.Open("../testdata/odd-tasks.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d bson.D
		if err := bson.UnmarshalExtJSON(sc.Bytes(), false, &d); err != nil {
			tb.Fatalf("%s: %v", sc.Text(), err)
		}
		doc := append(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "queue", Value: bson.NewObjectID()}, {Key: "status", Value: -2}, {Key: "node", Value: -1}}, d...)
		b, err := bson.Marshal(doc)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

var decodedFields = []string{"queue", "parameters", "cancel", "start_after", "timeout", "max_retries", "retry_delay", "max_termination_time", "max_output", "attempts",
	"max_timeouts", "timeouts", "usage_interval", "requested_resources", "memory_retry_factor", "end_before", "after", "waiting"}

// Any document a user can insert decodes without a panic into a task, or
// into an error when it has no ObjectId _id; every problem names the field
// it is about; the settings derived from it are sane; and a task without
// problems is one a runner will run. The same holds for queue documents.
// The seed corpus (testdata/odd-tasks.jsonl) runs with every go test; go
// test -fuzz FuzzDecodeTask ./queue explores from it.
func FuzzDecodeTask(f *testing.F) {
	for _, b := range oddTasks(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := bson.Raw(data)
		if raw.Validate() != nil {
			return
		}
		task, err := queue.DecodeTask(raw)
		if err != nil {
			if _, ok := raw.Lookup("_id").ObjectIDOK(); ok {
				t.Fatalf("a task with an ObjectId _id was refused: %v", err)
			}
			return
		}
		for _, p := range task.Problems {
			named := false
			for _, field := range decodedFields {
				named = named || strings.HasPrefix(p, field+" ")
			}
			if !named {
				t.Errorf("problem %q names no field", p)
			}
		}
		o := task.Options(nil)
		if o.Timeout < 0 || o.RetryDelay < 0 || o.MaxTermination < 0 || o.MaxRetries < 0 || o.MaxRetries > 1000 || o.MaxOutput < 0 || o.Attempts < 0 ||
			o.UsageInterval < 0 || o.MemoryRetryFactor <= 1 || o.MemoryRetryFactor > 100 || o.Requested.MemoryMB < 0 || o.Requested.CPUs < 0 {
			t.Errorf("insane options %+v", o)
		}
		if _, err := queue.ParseTask(raw); (err == nil) != (len(task.Problems) == 0) {
			t.Errorf("ParseTask error %v with problems %q", err, task.Problems)
		}
		task.Output("stdout")
		task.Malformed()
		if q, err := queue.ParseQueue(raw); err == nil && q.MaxThreads < 0 {
			t.Errorf("queue with maxthreads %d", q.MaxThreads)
		}
	})
}
