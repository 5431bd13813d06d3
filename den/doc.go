// Package den is the Disbatch execution node: the loop that, once a
// second, writes this node's document and claims queued tasks up to the
// queues' and the node's maxthreads, starting a task runner process
// (package runner) for each; beside it, the housekeeping reaps orphaned
// tasks, sweeps and keeps the counts.
//
// A Node is an orchestrator of components, each a type with its own
// state; they share a base.Env (store, log, clock, metrics, notices), each
// gets a params struct of what it reads of the configuration, and they
// call each other through narrow methods and small interfaces, never
// through function-valued fields. The node's pool is the set of task
// runner processes it started; "runner" is one such process. Files, by
// job:
//   - config.go: Config, its defaults (WithDefaults), what New refuses
//     (validate) and the configuration keys that set it (Settings);
//     node.go: New (defaults and bounds, config.go) and wire (which
//     makes the components, each with its params, and shows who calls
//     whom), Run (start-up, the loop, shutdown) and Ready; common.go:
//     the params of the loop's passes, and the aliases of the types
//     Config takes from the packages beside it.
//   - pass.go: passes, the loop's full pass and claim-only pass, with
//     their deadline, the budget of housekeeping writes (chores), and how
//     a failed pass is reported (an outage, or a document den cannot
//     read); steps.go: step (when it is due, what it does), and the full
//     pass's steps in their order (fullPassSteps: the server's time, the
//     config collection, the queues, the held tasks, the running counts,
//     the node document, the claims, the probe, the cancellations, live
//     output, the hand-over to the housekeeping); one loop walks them,
//     not a goroutine per service, since claims need the reads before
//     them and the writes share one budget; queuebook.go: what the loop knows of the queues (every queue
//     read now and then, the queues with work and the new ones every
//     pass); probe.go: finding work no count tells of (a task a driver
//     inserted into an idle or a new queue); queueindex.go:
//     the queues by _id, and queuesRead, the last read of every queue;
//     housekeeping.go: the housekeeping, a round after each full pass in
//     a goroutine of its own, walking its steps (houseSteps: counts,
//     oldest ready task, rescues, sweeps, stats, schedules, retention),
//     so that no claim waits behind it; progress.go: what Ready says (working, slow,
//     stuck); serve.go: which queues the node serves (plugins,
//     activequeues and ignorequeues, malformed queue documents), with
//     filter.go, the queue filter; the counts of queues inserted
//     without them (internal/countfill) and the oldest ready task's wait
//     (internal/oldest) are steps of the housekeeping too.
//   - the node document is package internal/heartbeat; nodeplugins.go:
//     the plugins it says it serves.
//   - the claimer is package internal/claim: the claims step
//     (steps.go) hands it each pass's read, and probe.go's step asks it
//     to probe for work no count tells of.
//   - the pool of task runner processes is package internal/runners:
//     the claimer hands it tasks, and it tells the claimer (Slots), the
//     rescuer and the stats what its runners did.
//   - the housekeeping's components are packages of their own, beside
//     the node: internal/rescue, internal/sweep, internal/schedule,
//     internal/stats and internal/retention; housekeeping.go calls on
//     them, a step each.
//
// A node counts what it does in its metrics (package metrics), says of
// itself in its node document (version, pid, start time, the host's
// resources, its last round of housekeeping) and, with Config.HTTP, serves
// /metrics, /healthz and /readyz (package httpserve) for as long as Run
// runs. Ready (and ReadyNote) is what /readyz answers: it is read from the
// loop's own progress, never from a command of its own.
//
// Subpackages: internal/claim (the claimer), internal/runners (the pool of task runner processes),
// internal/held (the tasks the node holds), internal/chore (the
// housekeeping's budget of writes and pace),
// internal/base (what every component is built on: its Env,
// Notices, the test Signals), cli (the den command line), runner (the task runner), config (configuration files),
// devdb (the embedded development database), dentest (the test harness;
// dentest/nodetest starts nodes in tests),
// backoff (retries), metrics (Prometheus collectors), httpserve (the HTTP
// endpoint).
package den
