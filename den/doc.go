// Package den is the Disbatch execution node: the loop that, once a
// second, writes this node's document, reaps its orphaned tasks and claims
// queued tasks up to the queues' and the node's maxthreads, starting a task
// runner process (package runner) for each.
//
// Files, by job:
//   - node.go: configuration, start-up, the loop and shutdown; Ready.
//   - pass.go: one pass of the loop, full (fullPass, pass) or claims only
//     (claimPass), with its deadline, its budget of housekeeping writes, and
//     how a failed pass is reported (an outage, or a document den cannot
//     read).
//   - heartbeat.go: the node document: when it is written, and the queues
//     it lists.
//   - serve.go: which queues this node serves (plugins, activequeues and
//     ignorequeues, bad queue documents); filter.go: the queue filter.
//   - counts.go: filling in the counts of queues inserted without them.
//   - claim.go: claiming within the queues' and the node's limits;
//     malformed.go: what a claim takes that cannot be a task; arrivals.go:
//     claiming at once when a task is inserted (change streams).
//   - held.go: what the node holds (its claimed and running tasks), and
//     capacity.go: the resources it offers tasks that request some.
//   - spawn.go: starting and watching runner processes; reuse.go: the pool
//     of idle runners and the task channel; live.go: asking runners for
//     live output.
//   - cancel.go: cancellation; rescue.go: the rescue of tasks whose runner
//     or node died; runnerid.go: whose a recorded runner is, and whether it
//     still runs its task; leftovers.go: stopping a dead run's processes.
//   - sweep.go: the periodic sweep (cancel flags, malformed tasks, values
//     rewritten); deps.go: dependencies; unfit.go: notes on tasks no node
//     can run.
//   - notice.go: logging a condition once when it starts and once when it
//     clears.
//
// A node counts what it does in its metrics (package metrics), says of
// itself in its node document (version, pid, start time, the host's
// resources) and, with Config.HTTP, serves /metrics, /healthz and /readyz
// (package httpserve) for as long as Run runs. Ready is what /readyz
// answers: it is read from the loop's own results, never from a command of
// its own.
//
// Subpackages: cli (the den command line), runner (the task runner), config (configuration files),
// devdb (the embedded development database), dentest (the test harness;
// dentest/nodetest starts nodes in tests),
// backoff (retries), metrics (Prometheus collectors), httpserve (the HTTP
// endpoint).
package den
