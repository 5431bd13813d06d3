// Package claim is a node's claimer: claiming queued tasks within the
// queues' and the node's limits (maxthreads, threads, the node's
// maxthreads) and what the node has free for tasks that request
// resources, and handing each to the pool. Files, by job:
//   - claim.go: Claimer, a pass's claims (ClaimPass), the rounds that
//     claim from the queues with work, alone or grouped, putting back
//     what could not start, and pausing after runners fail to start.
//   - probe.go: finding work no count tells of (Probe).
//   - capacity.go: what the node offers tasks that request resources
//     (Capacity, ResourceLimits).
//   - malformed.go: what a claim takes that cannot be a task.
//   - ratelimit.go: a queue's rate limit, a start taken after each claim.
//   - priority.go: which queues have tasks with a priority.
//   - arrivals.go: claiming at once when a task is inserted (change
//     streams, ArrivalSource).
//
// The claimer keeps what the node holds (package held) and is told by
// the pool when a runner is done with its task (Slots), so that a freed
// slot is claimed again at once.
package claim
