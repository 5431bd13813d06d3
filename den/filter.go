package den

import (
	"maps"

	"github.com/den-project/den/queue"
)

// queueFilter is Disbatch's activequeues/ignorequeues: when activequeues is
// not empty, the node serves only those queues; otherwise it serves every
// queue but those in ignorequeues. Entries are queue _ids as hex strings,
// as Disbatch writes them; den also accepts queue names.
type queueFilter struct {
	active, ignore map[string]bool
}

func newQueueFilter(active, ignore []string) queueFilter {
	set := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range list {
			if s != "" {
				m[s] = true
			}
		}
		return m
	}
	return queueFilter{active: set(active), ignore: set(ignore)}
}

// same reports whether f and g allow the same queues.
func (f queueFilter) same(g queueFilter) bool {
	return maps.Equal(f.active, g.active) && maps.Equal(f.ignore, g.ignore)
}

func (f queueFilter) allows(q queue.Queue) bool {
	if len(f.active) > 0 {
		return f.active[q.ID.Hex()] || (q.Name != "" && f.active[q.Name])
	}
	return !f.ignore[q.ID.Hex()] && !(q.Name != "" && f.ignore[q.Name])
}
