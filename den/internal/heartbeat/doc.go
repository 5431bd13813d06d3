// Package heartbeat writes a node's document in nodes: its timestamp
// every pass (and, when passes are slow, from KeepAlive), what the node
// says of itself (version, pid, start time, the host's resources, the
// plugins it serves, its last round of housekeeping, what it offers tasks
// that request resources), and the queues it lists (at most
// NodeQueuesMax, those it holds tasks of first).
package heartbeat
