// Package rescue rescues tasks whose runner or node died, and claims no
// runner took up: a task of a runner on this host that no longer runs
// it, of a runner elsewhere whose signs of life went stale, or of a node
// whose document stopped beating. Each rescue is a retry or a failure,
// as the task's settings say, and takes from the housekeeping's budget
// of writes.
package rescue
