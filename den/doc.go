// Package den is the Disbatch execution node: the loop that, once a
// second, writes this node's document and claims queued tasks up to the
// queues' and the node's maxthreads, starting a task runner process
// (package runner) for each; beside it, the housekeeping reaps orphaned
// tasks, sweeps and keeps the counts.
//
// A Node is an orchestrator of components. Each component is a package
// of its own in den/internal, with its own state; they share a base.Env
// (store, log, clock, metrics, notices), each takes what it reads of the
// configuration as its Params, and they call each other through narrow
// methods and small interfaces each declares, never through
// function-valued fields (but Config's two test hooks, which the claimer
// and the retention take in their Params). The components:
//   - internal/claim: the claimer, claiming within the queues' and the
//     node's limits (with internal/held, what the node holds);
//   - internal/runners: the pool of task runner processes ("runner" is
//     one such process), which the claimer hands tasks and which tells
//     the claimer (Slots), the rescuer and the stats what its runners did;
//   - internal/heartbeat: the node document;
//   - the housekeeping's: internal/rescue, internal/sweep,
//     internal/schedule, internal/stats, internal/retention,
//     internal/countfill (the counts of queues inserted without them) and
//     internal/oldest (the oldest ready task's wait), rationed by
//     internal/chore (a round's budget of writes, a chore's pace).
//
// What stays in package den is the node itself, its configuration and
// its loop. Files, by job:
//   - config.go: Config, its defaults (WithDefaults), what New refuses
//     (validate), the configuration keys that set it (Settings), and the
//     aliases of the types Config takes from the packages beside it;
//     node.go: New (defaults and bounds, config.go) and wire (which
//     makes the components, each with its params, and shows who calls
//     whom), Run (start-up, the loop, shutdown) and Ready.
//   - pass.go: passes, the loop's full pass and claim-only pass, with
//     their deadline, and how a failed pass is reported (an outage, or a
//     document den cannot read); steps.go: step (when it is due, what it
//     does), and the full pass's steps in their order (fullPassSteps: the
//     server's time, the config collection, the queues, the held tasks,
//     the running counts, the node document, the claims, the probe, the
//     cancellations, live output, the hand-over to the housekeeping); one
//     loop walks them, not a goroutine per service, since claims need the
//     reads before them and the writes share one budget; queuebook.go:
//     what the loop knows of the queues (every queue read now and then,
//     the queues with work and the new ones every pass); probe.go: the
//     step that finds work no count tells of (a task a driver inserted
//     into an idle or a new queue); queueindex.go: queuesRead, the last
//     read of every queue.
//   - housekeeping.go: the housekeeping, a round after each full pass in
//     a goroutine of its own, walking its steps (houseSteps: counts,
//     oldest ready task, rescues, sweeps, stats, schedules, retention),
//     each calling on its component, so that no claim waits behind it;
//     progress.go: what Ready says (working, slow, stuck).
//   - serve.go: which queues the node serves (plugins, activequeues and
//     ignorequeues, malformed queue documents), with filter.go, the queue
//     filter; nodeplugins.go: the plugins the node says it serves.
//
// A node counts what it does in its metrics (package metrics), says of
// itself in its node document (version, pid, start time, the host's
// resources, its last round of housekeeping) and, with Config.HTTP, serves
// /metrics, /healthz and /readyz (package httpserve) for as long as Run
// runs. Ready (and ReadyNote) is what /readyz answers: it is read from the
// loop's own progress, never from a command of its own.
//
// Subpackages beside the components: internal/base (what every component
// is built on: its Env, Notices, Progress, the test Signals), cli (the den
// command line), runner (the task runner), config (configuration files),
// devdb (the embedded development database), dentest (the test harness;
// dentest/nodetest starts nodes in tests), backoff (retries), metrics
// (Prometheus collectors), httpserve (the HTTP endpoint).
package den
