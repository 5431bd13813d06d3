package runner

import (
	"testing"
	"time"

	"github.com/den-project/den/queue"
)

// At every dead_node_after the configuration allows, from its minimum up,
// a run with the default grace is gone before any node may rescue its
// task: the runner notices at most two beats after StopAfter (a beat in
// flight times out after one beat, the next tick follows), then SIGTERM and
// the grace to SIGKILL, with 5 s to spare for the hosts' clocks.
func TestDefaultGraceStopsBeforeRescue(t *testing.T) {
	for _, lease := range []time.Duration{time.Minute, queue.DefaultDeadNodeAfter, 90 * time.Second, 5 * time.Minute, time.Hour, 24 * time.Hour} {
		every := queue.BeatEvery(lease)
		gone := StopAfter(lease, every, queue.DefaultGrace) + 2*every + queue.DefaultGrace + 5*time.Second
		if gone > lease {
			t.Errorf("dead_node_after %s, beats every %s: the run may live %s, past its lease", lease, every, gone)
		}
	}
}

// A runner whose node is gone gives up recording its run only once no
// write of it has landed for longer than its lease allows, by then long
// run out: past the time any node may rescue the task (HeldFor), plus one
// more lease for the database to come back. So it never gives up while
// its run holds its lease (it stops a run that cannot renew it after
// StopAfter, and notices within two beats). At the defaults: 2 minutes,
// as the docs say.
func TestGiveUpOnlyLongAfterTheLeaseRanOut(t *testing.T) {
	for _, lease := range []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour} {
		every := queue.BeatEvery(lease)
		for _, grace := range []time.Duration{0, time.Second, queue.DefaultGrace, lease / 2, 3 * lease} {
			giveUp := GiveUpAfter(lease, every, grace)
			if held := HeldFor(lease, every, grace); giveUp < held+lease {
				t.Errorf("dead_node_after %s, grace %s: gives up %s after the last write, before the lease ran out (%s) and one more lease", lease, grace, giveUp, held)
			}
			if noticed := StopAfter(lease, every, grace) + 2*every; giveUp <= noticed {
				t.Errorf("dead_node_after %s, grace %s: gives up %s after the last write, while the run may still hold its lease (%s)", lease, grace, giveUp, noticed)
			}
		}
	}
	if got := GiveUpAfter(queue.DefaultDeadNodeAfter, queue.DefaultBeat, queue.DefaultGrace); got != 2*time.Minute {
		t.Errorf("at the defaults a runner gives up %s after its last write; the docs say 2m0s", got)
	}
}
