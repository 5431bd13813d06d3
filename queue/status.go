package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// Task status codes of Disbatch 4. Positive codes mean the task finished;
// negative codes other than the ones below may be set by users to hold a task
// back (it is still counted in count_todo).
const (
	StatusOrphaned   = -6 // was being worked on, disruption was unrecoverable
	StatusCancelled  = -5
	StatusBlocked    = -4
	StatusTerminated = -3
	StatusQueued     = -2 // waiting to be claimed
	StatusClaimed    = -1 // claimed by a node, runner not yet started
	StatusRunning    = 0  // a task runner is working on it
	StatusSucceeded  = 1
	StatusFailed     = 2
)

// Unclaimed is the value of a task's node field while it is queued.
const Unclaimed = -1

// Collection names of the protocol.
const (
	TasksCollection  = "tasks"
	QueuesCollection = "queues"
	NodesCollection  = "nodes"
	ConfigCollection = "config"
	// GridFSPrefix names Disbatch's own GridFS bucket: tasks.files and
	// tasks.chunks.
	GridFSPrefix = "tasks"
)

// StatusName returns a short human name for a status code, for logs.
func StatusName(status int) string {
	switch status {
	case StatusOrphaned:
		return "orphaned"
	case StatusCancelled:
		return "cancelled"
	case StatusBlocked:
		return "blocked"
	case StatusTerminated:
		return "terminated"
	case StatusQueued:
		return "queued"
	case StatusClaimed:
		return "claimed"
	case StatusRunning:
		return "running"
	case StatusSucceeded:
		return "succeeded"
	case StatusFailed:
		return "failed"
	}
	if status > 0 {
		return "finished"
	}
	return "held"
}

// ParseStatus reads a status given by an operator: a number, or a name of
// StatusName (queued, running, failed, ...).
func ParseStatus(s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	for st := StatusOrphaned; st <= StatusFailed; st++ {
		if StatusName(st) == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("status %q: want a number or one of orphaned, cancelled, blocked, terminated, queued, claimed, running, succeeded, failed", s)
}

// Output streams of a task: the fields Task.Output reads.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Ended reports whether a task with this status will not change again
// without someone acting: finished (1 and up), cancelled (-5) or orphaned
// (-6).
func Ended(status int) bool {
	return status >= StatusSucceeded || status == StatusCancelled || status == StatusOrphaned
}
