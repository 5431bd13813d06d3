// Package worker is the second of a runner's two processes (see den/runner
// for what a runner is): the one its supervisor starts. Main links to the
// supervisor (link.go) and to the node's task channel (tasks.go),
// connects to MongoDB (connect.go, through the node's relay or directly)
// and serves the node's tasks one after another (worker.go).
//
// For each task the worker makes an Executor, whose Run makes one task's
// run (a taskRun): it moves the task to running, runs the plugin, stores
// its output and records its result, retrying its final writes until they
// land (run.go, record.go). Plugin tests run an Executor in-process,
// without a supervisor (plugins/plugintest); it then contains nothing.
//
// Files:
//   - worker.go: Main and the loop over the node's tasks;
//   - run.go: Executor and taskRun: start, heartbeats, the plugin;
//   - record.go: how a run ends (decide, a pure function a table test
//     covers) and the writes that record it;
//   - giveup.go: when the worker stops trying to record a run;
//   - link.go: asks the supervisor (the control channel);
//   - tasks.go: the worker's end of the task channel;
//   - connect.go: its MongoDB client, relayed or direct;
//   - usage.go and memory.go: what it does with the supervisor's measures;
//   - live.go, output.go and blocks.go: a run's output.
package worker
