// Package runners is a node's pool of task runner processes, the only
// code of the node that deals with them (package den/runner is the
// process itself): starting them, handing them claimed tasks, listening
// to their reports, reaping them, signalling them (cancel, live output,
// kill) after proving which task they run now, and stopping what a dead
// run left behind. Files, by job:
//   - pool.go: Pool, Command (how a runner is started), the hand-over of
//     a task to a new or an idle runner, and what the pool tells the rest
//     of the node (Slots, Rescuer, Stats).
//   - signal.go: signalling a runner, only the one that runs the task now.
//   - runnerid.go: whose a recorded runner is, and whether it still runs
//     its task.
//   - leftovers.go: the cgroups runs get, and stopping what a dead run
//     left.
//   - live.go: asking runners for live output.
//
// The node (package den) makes one Pool, and sets its Slots (the
// claimer), Rescuer and Stats before it runs.
package runners
