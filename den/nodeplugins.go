package den

import (
	"encoding/json"
	"slices"

	"github.com/den-project/den/plugins"
)

// servedPlugins are the plugins a node runs tasks with, as it writes them
// in its node document (queue.FieldPlugins): every plugin of its registry
// but those its configuration keeps off (plugins.Gated, as the command
// plugin is unless enabled). The node decides the same for each queue
// (serve.go), so a queue of a plugin listed here is served.
func servedPlugins(reg *plugins.Registry, config map[string]json.RawMessage) []string {
	out := []string{}
	for _, name := range reg.Names() {
		p, _ := reg.Lookup(name)
		if g, gated := p.(plugins.Gated); gated && !g.Enabled(config[name]) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// offPlugins are the plugins of reg not in on (servedPlugins): those the
// node's configuration keeps off, for its start line.
func offPlugins(reg *plugins.Registry, on []string) []string {
	out := []string{}
	for _, name := range reg.Names() {
		if !slices.Contains(on, name) {
			out = append(out, name)
		}
	}
	return out
}
