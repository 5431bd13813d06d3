package den

import (
	"context"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// A node started for some queues (--activequeues, --ignorequeues) serves
// those and says nothing about the others, however wrong they are for it:
// only a queue it would serve and cannot is its concern, logged once.
func TestServeableWarnsOnlyAboutQueuesTheFilterAllows(t *testing.T) {
	t.Parallel()
	reg := &plugins.Registry{}
	reg.Register("Demo", plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) { return 1, nil }))
	q := func(name, plugin, problem string) queue.Queue {
		return queue.Queue{ID: bson.NewObjectID(), Name: name, Plugin: plugin, MaxThreadsProblem: problem}
	}
	demo, other, broken, missing := q("demo", "Demo", ""), q("other", "Demo", ""), q("broken", "Demo", "maxthreads is a string"), q("missing", "No::Such::Plugin", "")
	all := []queue.Queue{demo, other, broken, missing}
	for _, tc := range []struct {
		name           string
		active, ignore []string
		served         []string
		warned         []string
	}{
		{"active demo", []string{"demo"}, nil, []string{"demo"}, nil},
		{"active demo and missing", []string{"demo", "missing"}, nil, []string{"demo"}, []string{"missing"}},
		{"ignore missing", nil, []string{"missing"}, []string{"demo", "other", "broken"}, []string{"broken"}},
		{"no filter", nil, nil, []string{"demo", "other", "broken"}, []string{"broken", "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.WarnLevel)
			ps := &passes{Env: &base.Env{Log: zap.New(core), Notes: &base.Notices{}, Metrics: metrics.New(nil)}, plugins: reg}
			var served []string
			for _, s := range ps.serveable(all, newQueueFilter(tc.active, tc.ignore)) {
				served = append(served, s.Name)
			}
			if !slices.Equal(served, tc.served) {
				t.Errorf("served %v, want %v", served, tc.served)
			}
			var warned []string
			for _, e := range logs.All() {
				warned = append(warned, e.ContextMap()["queue"].(string))
			}
			if !slices.Equal(warned, tc.warned) {
				t.Errorf("warned about %v, want %v", warned, tc.warned)
			}
			// A second pass logs nothing new: each problem once.
			ps.serveable(all, newQueueFilter(tc.active, tc.ignore))
			if n := logs.Len(); n != len(tc.warned) {
				t.Errorf("%d warnings after a second pass, want %d", n, len(tc.warned))
			}
		})
	}
}
