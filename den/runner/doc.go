// Package runner is what a runner's two processes and its node share: the
// task a node hands a runner (spec.go), the node–runner protocol on the
// task channel (protocol.go), the supervisor–worker protocol on the
// control channel (control.go), and the times the three must agree on
// (lease.go).
//
// # What a runner is
//
// In den, "runner" means one thing: a task runner (Disbatch's DTR), the
// pair of processes a node starts, from den's own binary (den task-runner),
// to run the tasks it claimed, one at a time (several of one queue in
// turn). The node starts it in its own session, so that stopping,
// restarting or upgrading the node never interrupts a task, and a plugin
// that panics or leaks cannot take the node down. Its two processes:
//
//   - the supervisor (den/runner/supervisor), which the node starts. It
//     leads the run's session and process group and is a child subreaper;
//     it starts the worker. Every process the task starts stays below it:
//     those whose parent exits are re-parented to it, not to init, however
//     often they fork or call setsid. It holds no database connection and
//     runs no plugin code, so it can reap any child it is given.
//   - the worker (den/runner/worker), which connects to MongoDB and runs
//     the task: for each task, an Executor makes one task's run (start,
//     plugin, output, result, report). When the task ends, and before its
//     result is recorded, the worker asks the supervisor to stop every
//     process left; when the worker itself dies, the supervisor stops what
//     it left and exits, and the node rescues the task only after that.
//
// den/runner/taskrunner is the entry point of both: the re-exec'd binary
// decides there which of the two it is. The two talk over the control
// channel; the worker alone talks to the node (the task channel) and to
// MongoDB. The node's side (how many runners, which is idle, handing them
// tasks) is den's, in the root package; plugin tests run a worker's
// Executor in-process, without a supervisor (plugins/plugintest).
//
// # What a runner does with a task
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
// a node rescues the task (den/runner/worker/giveup.go). If the task
// changed under it (reaped, rescued, deleted), its output is still stored
// in GridFS under metadata.task_id and the conflict is logged: nothing is
// lost.
//
// A runner may serve several tasks of one queue, one after another (when
// its Spec says Reuse; den/runner/worker/tasks.go). Each is a run of its
// own: the supervisor gives it a new token, run marker, cgroup and run
// proof, and measures and limits it from zero; the previous run's
// processes were all stopped before its result was recorded.
//
// This package imports neither process's package: the node, the
// supervisor and the worker all import it.
package runner
