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
// Every query is a method of one type, Store (store.go), over one
// connection. Its callers hold it as the role they play, each declared
// once as an interface in roles.go, as asynq's base.Broker is: NodeStore
// the node's, RunnerStore the runner of one task's, OperatorStore the
// command line's, the web page's and the Disbatch web API's, and
// ArchiveReader the archive's reader (NewArchive). A method two roles use
// is written once and listed in both. Files are by subject, not by role:
// claim.go, lifecycle.go, deps.go, queueedit.go, tasklist.go, ...
package queue
