// Package den is the Disbatch execution node: the loop that, once a
// second, writes this node's document, reaps its orphaned tasks and claims
// queued tasks up to the queues' and the node's maxthreads, starting a task
// runner process (package runner) for each.
//
// Files: node.go (configuration, start-up, the loop and shutdown), tick.go
// (one pass of the loop), claim.go (claiming within limits), spawn.go
// (starting and watching runner processes), control.go (cancellation, and
// rescue of tasks whose runner or node died), filter.go (activequeues and
// ignorequeues), notice.go (logging a condition once when it starts and once
// when it clears).
//
// A node counts what it does in its metrics (package metrics), says of
// itself in its node document (version, pid, start time, the host's
// resources) and, with Config.HTTP, serves /metrics, /healthz and /readyz
// (package httpserve) for as long as Run runs. Ready is what /readyz
// answers: it is read from the loop's own results, never from a command of
// its own.
//
// Subpackages: cli (the den command line), runner (the task runner), config (configuration files),
// devdb (the embedded development database), dentest (the test harness),
// backoff (retries), metrics (Prometheus collectors), httpserve (the HTTP
// endpoint).
package den
