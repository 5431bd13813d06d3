// Package runner is the task runner (Disbatch's DTR): the process that runs
// claimed tasks, one at a time (several of one queue in turn; reuse.go).
// The node starts it as a separate process in its own session, so that
// stopping, restarting or upgrading the node never interrupts a task, and
// a plugin that panics or leaks cannot take the node down.
//
// A runner moves its task from claimed (-1) to running (0) only if the task
// is still claimed by its node, runs the plugin, checks the result (the
// status must be a positive integer), stores stdout and stderr (in the task
// document or in Disbatch's GridFS, per the gfs setting; each stream at most
// max_output bytes, past which the plugin is stopped and the task fails),
// records the status
// and decrements the queue's count_todo. Its final writes are retried until
// they land. If the task changed under it (reaped, rescued, deleted), its
// output is still stored in GridFS under metadata.task_id and the conflict is
// logged: nothing is lost.
package runner
