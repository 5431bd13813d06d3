// Package metrics holds a node's Prometheus collectors: one Metrics per
// node, registered on a registry the caller owns (never the global default
// registry), so that two nodes in one process, or a test, never share
// counts. The node updates them as it works; package httpserve serves the
// registry at /metrics. The names, types and labels are listed in the
// docs/operations.md, "Metrics and health".
//
// Everything here is counted in the node's memory: no metric costs a
// database command. Counters start at zero when the node process starts,
// as Prometheus expects of counters.
package metrics
