// Package sweep is the periodic sweep of the served queues: the cancel
// flags of queued and held tasks (cancel.go), malformed tasks failed
// with their reason and values rewritten to what Disbatch expects
// (sweep.go), dependencies released, failed or found in a cycle
// (deps.go), and notes on tasks no live node can run (unfit.go).
package sweep
