// Package queue owns the Disbatch 4 documents in MongoDB and every query
// the protocol binds a node to: the shapes of the queues, tasks and nodes
// collections, the status codes, the claim with findOneAndUpdate, orphan
// reaping, the count_todo/count_total bookkeeping and the indexes.
//
// Field names, status codes and query shapes here are the contract of
// Disbatch 4: a Perl Disbatch node and den must be able to
// work the same database at the same time, so nothing in this package may
// write a field a Perl node would misread. Everything den adds beyond the
// protocol is an optional field a Disbatch 4 node ignores, or a
// collection of den's own: tasks_archive (retired tasks), schedules,
// leases (work one node at a time does, such as retention), stats
// (the status page's time series, in stats.go, with the run and wait
// times counted in buckets in durations.go), and rate_limits (the
// starts of rate-limited queues, RateLimits in ratelimit.go: a small type
// of its own over the same database).
//
// The queries are split by who makes them, each role holding a store of
// its own over the same connection (NewStores builds all three from one):
// NodeStore is the node's (nodestore.go lists what it shares), RunnerStore
// the runner of one task's, OperatorStore the command line's, the web
// page's and the Disbatch web API's. What more than one role uses is
// written once, on the unexported conn. Files are by subject, not by role:
// claim.go, lifecycle.go, deps.go, queueedit.go, tasklist.go, ...
package queue
