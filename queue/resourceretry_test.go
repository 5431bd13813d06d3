package queue_test

import (
	"strings"
	"testing"

	"github.com/den-project/den/queue"
)

func TestNextMemoryRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		old             queue.Resources
		factor, largest float64
		want            float64 // 0: not retried
	}{
		{"times the factor", queue.Resources{MemoryMB: 100, CPUs: 2}, 1.5, 0, 150},
		{"rounded up to a whole MiB", queue.Resources{MemoryMB: 101}, 1.5, 0, 152},
		{"capped by the largest offer", queue.Resources{MemoryMB: 100}, 3, 250, 250},
		{"at the cap: not retried", queue.Resources{MemoryMB: 250}, 3, 250, 0},
		{"over the cap already: not retried", queue.Resources{MemoryMB: 300}, 2, 250, 0},
		{"no factor: the default", queue.Resources{MemoryMB: 100}, 0, 0, 150},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			next, ok, why := queue.NextMemoryRequest(c.old, c.factor, c.largest)
			switch {
			case c.want == 0 && (ok || !strings.Contains(why, "no live den node offers more")):
				t.Errorf("got %v, %v, %q; want no retry, saying why", next, ok, why)
			case c.want != 0 && (!ok || next.MemoryMB != c.want || next.CPUs != c.old.CPUs):
				t.Errorf("got %v, %v, %q; want %g MiB, the cpus kept", next, ok, why, c.want)
			}
		})
	}
}
