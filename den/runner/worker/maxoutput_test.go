package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Any plugin's output is capped at max_output bytes per stream: the node's
// (default 1 GiB), lowered but never raised by the queue's or the task's.
// Past it the plugin's context is cancelled, the stored stream ends with a
// line saying where it was cut, and the task fails with the reason in
// stderr.
func TestOutputCapStopsGoPlugin(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		node        int64 // runner.Spec.MaxOutput; 0: default
		queue, task any   // max_output fields; nil: unset
		want        int
	}{
		{name: "task lowers the node's default", task: 10000, want: 10000},
		{name: "queue lowers the node's", node: 50000, queue: 3500.0, want: 3500},
		{name: "task cannot raise the node's", node: 5000, queue: 1e9, task: int64(1 << 40), want: 5000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunk := bytes.Repeat([]byte("x"), 999)
			chunk = append(chunk, '\n')
			stopped := false
			p := plugins.Func(func(ctx context.Context, _ *queue.Task, env plugins.Env) (int, error) {
				for range 100000 { // 100 MB if nothing stops it
					if ctx.Err() != nil {
						stopped = true
						return 1, nil
					}
					env.Stdout.Write(chunk)
				}
				return 1, nil
			})
			s := newSetup(t, p, "auto", bson.D{})
			s.executor.Spec.MaxOutput = tc.node
			ctx := dentest.Context(t)
			if tc.queue != nil {
				dentest.Update(t, s.db.Collection("queues"), bson.D{{Key: "_id", Value: s.queue}}, bson.D{{Key: "$set", Value: bson.D{{Key: "max_output", Value: tc.queue}}}})
			}
			if tc.task != nil {
				dentest.Update(t, s.db.Collection("tasks"), bson.D{{Key: "_id", Value: s.task}}, bson.D{{Key: "$set", Value: bson.D{{Key: "max_output", Value: tc.task}}}})
			}
			if err := s.executor.Run(ctx); err != nil {
				t.Fatal(err)
			}
			raw := dentest.Task(t, s.db, s.task)
			stdout, _ := output(t, s.db, raw, "stdout")
			stderr, _ := output(t, s.db, raw, "stderr")
			want := string(bytes.Repeat(chunk, tc.want/len(chunk)+1)[:tc.want])
			if !strings.HasSuffix(want, "\n") {
				want += "\n" // the cut line starts a line of its own
			}
			want += fmt.Sprintf("den: stdout was cut at %d bytes (max_output); the rest was discarded\n", tc.want)
			if stdout != want {
				t.Fatalf("stdout: %d bytes, ends %q", len(stdout), stdout[max(0, len(stdout)-100):])
			}
			if !stopped {
				t.Error("the plugin's context was not cancelled")
			}
			if status(raw) != 2 || !strings.Contains(stderr, fmt.Sprintf("passed max_output (%d bytes)", tc.want)) {
				t.Fatalf("status %d stderr %q", status(raw), stderr)
			}
		})
	}
}
