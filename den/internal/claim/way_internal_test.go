package claim

import (
	"testing"
)

// How a claim goes about the queues with work, by the node's free slots.
func TestClaimWay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		nodeFree, queues, want int
	}{
		{0, 3, claimNone},
		{-1, 3, claimNone},
		{5, 0, claimNone},
		{2, 3, claimAlone},
		{3, 3, claimGrouped},
		{1 << 30, 3, claimGrouped},
	} {
		if got := claimWay(c.nodeFree, c.queues); got != c.want {
			t.Errorf("claimWay(%d free, %d queues) = %d, want %d", c.nodeFree, c.queues, got, c.want)
		}
	}
}
