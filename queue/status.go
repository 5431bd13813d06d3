package queue

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
