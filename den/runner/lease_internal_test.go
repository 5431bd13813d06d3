package runner

import (
	"testing"
	"time"

	"github.com/den-project/den/queue"
)

// At every dead_node_after the configuration allows, from its minimum up,
// a run with the default grace is gone before any node may rescue its
// task: the runner notices at most two beats after stopAfter (a beat in
// flight times out after one beat, the next tick follows), then SIGTERM and
// the grace to SIGKILL, with 5 s to spare for the hosts' clocks.
func TestDefaultGraceStopsBeforeRescue(t *testing.T) {
	for _, lease := range []time.Duration{time.Minute, queue.DefaultDeadNodeAfter, 90 * time.Second, 5 * time.Minute, time.Hour, 24 * time.Hour} {
		every := queue.BeatEvery(lease)
		gone := stopAfter(lease, every, queue.DefaultGrace) + 2*every + queue.DefaultGrace + 5*time.Second
		if gone > lease {
			t.Errorf("dead_node_after %s, beats every %s: the run may live %s, past its lease", lease, every, gone)
		}
	}
}
