// Package base holds what every component of a node is built on, in the
// manner of River's baseservice: the Env each component embeds (the
// store, the queues' rate limits, the log, the database server's clock,
// the metrics), the Notices that keep a condition seen every second to
// one log line when it starts and one when it clears, and the test
// Signals that tell a test what the node did (nil in production).
//
// It imports no other package of the node, so that the node's
// components, in package den and in the packages beside it, can share
// it without importing each other.
package base
