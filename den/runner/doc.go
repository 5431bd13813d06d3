// Package runner is the task runner (Disbatch's DTR): the process that runs
// claimed tasks, one at a time (several of one queue in turn;
// worker_tasks.go). The node starts it as a separate process in its own
// session, so that stopping, restarting or upgrading the node never
// interrupts a task, and a plugin that panics or leaks cannot take the node
// down.
//
// A runner moves its task from claimed (-1) to running (0) only if the task
// is still claimed by its node, runs the plugin, checks the result (the
// status must be a positive integer), stores stdout and stderr (in the task
// document or in Disbatch's GridFS, per the gfs setting; each stream at most
// max_output bytes, past which the plugin is stopped and the task fails),
// records the status and decrements the queue's count_todo. Its final
// writes are retried until they land, unless its node is gone and none
// has landed for GiveUpAfter, or it was asked to stop (SIGTERM) and
// StopRecordFor has passed: it then exits, saying so in one log line, and
// a node rescues the task (worker_giveup.go). If the task changed under it
// (reaped, rescued, deleted), its output is still stored in GridFS under
// metadata.task_id and the conflict is logged: nothing is lost.
//
// A runner is two processes, a supervisor and its worker (process.go). The
// files say which side each belongs to:
//   - Both sides, and the node: spec.go (the task a node hands a runner),
//     protocol.go (the node–runner protocol: its messages, its channel and
//     how they are encoded), control.go (the supervisor–worker protocol:
//     its verbs and answers), process.go (the entry point of either
//     process).
//   - The supervisor: supervisor.go (starts the worker, reaps, answers it,
//     stops a run's processes, kills a worker that does not stop when
//     asked), supervisor_usage.go (measures a run),
//     supervisor_memory.go (enforces a run's memory request).
//   - The worker: worker.go (serves the node's tasks one after another),
//     worker_run.go (one run: start, plugin, output, result, report),
//     worker_giveup.go (when it stops trying to record a run),
//     worker_link.go (asks the supervisor), worker_tasks.go (its end of the
//     task channel), worker_connect.go (its MongoDB client, relayed or
//     direct), worker_usage.go and worker_memory.go (what it does with the
//     supervisor's measures), worker_live.go, worker_output.go and
//     worker_blocks.go (a run's output).
package runner
