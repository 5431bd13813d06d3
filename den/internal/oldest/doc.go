// Package oldest measures how long each served queue's oldest ready
// task has waited (den_queue_oldest_ready_seconds), a step of the
// housekeeping.
package oldest
