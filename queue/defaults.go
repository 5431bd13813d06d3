package queue

import "time"

// Timing defaults shared by the node, its task runners and the
// configuration: one place, so that they cannot drift apart.
const (
	// DefaultGrace is the time between SIGTERM and SIGKILL when neither
	// the task, its queue nor the node sets max_termination_time.
	DefaultGrace = 10 * time.Second
	// DefaultBeat is how often a task runner records that its run is
	// alive (runner.beat): BeatEvery(DefaultDeadNodeAfter).
	DefaultBeat = DefaultDeadNodeAfter / 8
	// DefaultDeadNodeAfter is how long a node (or a run) may stay silent
	// before others rescue its tasks. One minute is the shortest lease
	// under which a run with the default grace (10 s) is stopped before
	// any node may rescue it (grace <= lease/2 - 2 beats - 5 s, with beats
	// every lease/8), and its beats cost a running task 0.13 commands/s
	// (docs/performance.md, BenchmarkRecovery).
	DefaultDeadNodeAfter = time.Minute
	// DefaultOrphanAge is how long a claim may wait for its runner.
	DefaultOrphanAge = 5 * time.Minute
)

// BeatEvery is how often a run renews its lease (runner.beat) under a
// dead_node_after of lease: an eighth of it, between 1 s and 1 minute. An
// eighth leaves a run with the default grace room to stop (see
// DefaultDeadNodeAfter) at a one-minute lease; each beat is one command.
func BeatEvery(lease time.Duration) time.Duration {
	return min(max(lease/8, time.Second), time.Minute)
}
