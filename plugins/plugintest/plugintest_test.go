package plugintest_test

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/plugintest"
	"github.com/den-project/den/queue"
)

// Run reports what den records, by den's rules: large output read back
// from GridFS, panics and errors as failures, the configuration section
// handed over, only the plugin's own fields in Records, task fields such as
// timeout applied.
func TestRunReportsWhatDenRecords(t *testing.T) {
	srv := plugintest.New(t)
	ctx := context.Background()
	big := strings.Repeat("x", 3<<20)
	cases := []struct {
		name    string
		plugin  plugins.Func
		opts    []plugintest.Option
		status  int
		stdout  string
		stderr  string
		records map[string]any
	}{
		{name: "output through GridFS", status: 1, stdout: big, records: map[string]any{}, opts: []plugintest.Option{plugintest.GFS("true")},
			plugin: func(_ context.Context, _ *queue.Task, env plugins.Env) (int, error) {
				env.Stdout.Write([]byte(big))
				return plugins.StatusSucceeded, nil
			}},
		{name: "panic", status: 2, stderr: "panicked: boom", records: map[string]any{},
			plugin: func(context.Context, *queue.Task, plugins.Env) (int, error) { panic("boom") }},
		{name: "config and records", status: 1, stdout: "from config", records: map[string]any{"mine": "kept"},
			opts: []plugintest.Option{plugintest.Config(map[string]string{"say": "from config"})},
			plugin: func(_ context.Context, _ *queue.Task, env plugins.Env) (int, error) {
				var c struct {
					Say string `json:"say"`
				}
				if err := env.Config(&c); err != nil {
					return plugins.StatusFailed, err
				}
				env.Stdout.Write([]byte(c.Say))
				if err := env.Record("status", 9); err == nil {
					return plugins.StatusFailed, nil
				}
				return plugins.StatusSucceeded, env.Record("mine", "kept")
			}},
		{name: "timeout from a task field", status: 2, stderr: "timed out", records: map[string]any{},
			opts: []plugintest.Option{plugintest.Field("timeout", 1)},
			plugin: func(ctx context.Context, _ *queue.Task, _ plugins.Env) (int, error) {
				<-ctx.Done()
				return plugins.StatusFailed, ctx.Err()
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := srv.Run(ctx, tc.plugin, bson.D{}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || res.Stdout != tc.stdout || !strings.Contains(res.Stderr, tc.stderr) {
				t.Errorf("status %d, stdout %d bytes %.40q, stderr %.200q; want %d, %d bytes, stderr with %q",
					res.Status, len(res.Stdout), res.Stdout, res.Stderr, tc.status, len(tc.stdout), tc.stderr)
			}
			if _, inGridFS := res.Task.Lookup("stdout").ObjectIDOK(); inGridFS != (tc.name == "output through GridFS") {
				t.Errorf("stdout in GridFS: %v", inGridFS)
			}
			if len(res.Records) != len(tc.records) || (tc.records["mine"] != nil && res.Records["mine"] != tc.records["mine"]) {
				t.Errorf("records %v, want %v", res.Records, tc.records)
			}
		})
	}
}
