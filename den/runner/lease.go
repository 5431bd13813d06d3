package runner

import (
	"time"

	"github.com/den-project/den/queue"
)

// How long each side waits for the other. The node, the supervisor and
// the worker each hold one of these times, and they are only safe
// together: a run stops itself (StopAfter) before any node may rescue its
// task (HeldFor), and a worker gives up recording it (GiveUpAfter) only
// long after; a supervisor kills a worker that does not stop when asked
// (StopWithin) only after the worker has had its grace, PluginSlack and
// StopRecordFor. So they live here, side by side.

// DefaultGrace is the time between SIGTERM and SIGKILL when neither the
// task, its queue nor the node sets max_termination_time.
const DefaultGrace = queue.DefaultGrace

// PluginSlack is how long past the task's grace a stopped plugin may take
// to return: the time a program's leftover children may hold its output
// open (the command plugin's WaitDelay), plus slack.
const PluginSlack = 7 * time.Second

// StopRecordFor is how long a runner asked to stop (SIGTERM) tries to
// record its run, once the run is stopped: long enough to ride out a
// replica set's election (about 12 s with the default
// electionTimeoutMillis), short enough for an operator's SIGTERM.
const StopRecordFor = 30 * time.Second

// StopAfter is how long a run may go without a heartbeat landing before
// its runner stops it: its lease (dead_node_after, after which a node may
// rescue the task), less the task's grace (SIGTERM to SIGKILL), two beats
// and 5 s; at least half the lease. So the run's processes are gone
// before any node may start another attempt, where the grace is at most
// half the lease less two beats and 5 s.
func StopAfter(lease, every, grace time.Duration) time.Duration {
	return max(lease-grace-2*every-5*time.Second, lease/2)
}

// HeldFor is how long after its last heartbeat landed a run's processes
// may still exist: its runner stops the run StopAfter after that beat and
// finds it out within two beats (a beat that fails may take a beat to
// time out), the processes get the grace before SIGKILL, and 5 s to spare.
// That is the lease (dead_node_after) where the grace fits in it, else
// more. A node that cannot signal a run's runner (it is on another host)
// starts its task again only after it.
func HeldFor(lease, every, grace time.Duration) time.Duration {
	return StopAfter(lease, every, grace) + 2*every + grace + 5*time.Second
}

// GiveUpAfter is how long a runner whose node is gone keeps trying its
// final writes after the last write of its run landed: HeldFor (after
// which any node may rescue the task) plus one more lease
// (dead_node_after), for the database to come back while the run can
// still be recorded. At the defaults (a one-minute lease, beats every
// 7.5 s, a 10 s grace) that is 2 minutes.
func GiveUpAfter(lease, every, grace time.Duration) time.Duration {
	return HeldFor(lease, every, grace) + lease
}

// StopWithin is how long after SIGTERM a runner's supervisor gives its
// worker to exit before it kills it: the task's grace to stop the plugin's
// program, the time a plugin may take past it (PluginSlack), the grace
// again for what the run left, StopRecordFor to record, and 10 s to
// disconnect.
func StopWithin(grace time.Duration) time.Duration {
	return 2*grace + PluginSlack + StopRecordFor + 10*time.Second
}
