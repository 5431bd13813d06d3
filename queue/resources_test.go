package queue_test

import (
	"testing"

	"github.com/den-project/den/queue"
)

// The unfit note names what is requested (only the parts requested) and
// the largest offer, each part of which may come from another node; a
// request that fits has none.
func TestUnfitReason(t *testing.T) {
	t.Parallel()
	largest := queue.Largest(queue.Resources{MemoryMB: 31000, CPUs: 2}, queue.Resources{MemoryMB: 1000, CPUs: 8})
	for _, c := range []struct {
		req  queue.Resources
		want string
	}{
		{queue.Resources{MemoryMB: 64000, CPUs: 2}, "requests 64000 MiB, 2 cpus; the largest live den node offers 31000 MiB, 8 cpus"},
		{queue.Resources{CPUs: 16}, "requests 16 cpus; the largest live den node offers 31000 MiB, 8 cpus"},
		{queue.Resources{MemoryMB: 31000, CPUs: 8}, ""},
		{queue.Resources{}, ""},
	} {
		if got := queue.UnfitReason(c.req, largest); got != c.want {
			t.Errorf("UnfitReason(%v) = %q, want %q", c.req, got, c.want)
		}
	}
}
