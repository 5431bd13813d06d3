package den

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// gatedPlugin is on only when its configuration says {"on": true}.
type gatedPlugin struct{}

func (gatedPlugin) Run(context.Context, *queue.Task, plugins.Env) (int, error) { return 1, nil }
func (gatedPlugin) Enabled(config json.RawMessage) bool                        { return string(config) == `{"on":true}` }

// A node lists the plugins of its registry, less a gated one its
// configuration keeps off (the node document's plugins, which the
// Disbatch web API's GET /plugins reads, and its start line, which lists
// the ones off apart).
func TestServedPlugins(t *testing.T) {
	t.Parallel()
	var reg plugins.Registry
	reg.Register("B::Plain", plugins.Func(func(context.Context, *queue.Task, plugins.Env) (int, error) { return 1, nil }))
	reg.Register("A::Gated", gatedPlugin{})
	if got := servedPlugins(&reg, nil); !slices.Equal(got, []string{"B::Plain"}) {
		t.Errorf("gated plugin off: %v, want [B::Plain]", got)
	}
	if got := servedPlugins(&reg, map[string]json.RawMessage{"A::Gated": json.RawMessage(`{"on":true}`)}); !slices.Equal(got, []string{"A::Gated", "B::Plain"}) {
		t.Errorf("gated plugin on: %v, want [A::Gated B::Plain]", got)
	}
	// The start line lists the gated plugin apart while it is off.
	if got := offPlugins(&reg, servedPlugins(&reg, nil)); !slices.Equal(got, []string{"A::Gated"}) {
		t.Errorf("off: %v, want [A::Gated]", got)
	}
	if got := offPlugins(&reg, []string{"A::Gated", "B::Plain"}); got == nil || len(got) != 0 {
		t.Errorf("all on, off: %#v, want an empty list", got)
	}
	if got := servedPlugins(&plugins.Registry{}, nil); got == nil || len(got) != 0 {
		t.Errorf("no plugins: %#v, want an empty list (written as [])", got)
	}
}
