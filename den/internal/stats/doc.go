// Package stats records the time series of the status page's charts
// (queue.StatsCollection): completions counted as runners report them,
// per queue and for the node, with the runs' run and wait times in
// buckets, written once a minute with each queue's backlog and the node's
// own sample, and trimmed to its retention.
package stats
