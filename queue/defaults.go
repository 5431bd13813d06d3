package queue

import "time"

// Timing defaults shared by the node, its task runners and the
// configuration: one place, so that they cannot drift apart.
const (
	// DefaultGrace is the time between SIGTERM and SIGKILL when neither
	// the task, its queue nor the node sets max_termination_time.
	DefaultGrace = 10 * time.Second
	// DefaultBeat is how often a task runner records that its run is
	// alive (runner.beat). It must stay far below DefaultDeadNodeAfter.
	DefaultBeat = 30 * time.Second
	// DefaultDeadNodeAfter is how long a node (or a run) may stay silent
	// before others rescue its tasks.
	DefaultDeadNodeAfter = 5 * time.Minute
	// DefaultOrphanAge is how long a claim may wait for its runner.
	DefaultOrphanAge = 5 * time.Minute
)
