// Package mongoclient owns the MongoDB client options den's processes use
// for their own connections: the write concern, retryable writes and
// reads, the read preference and the timeouts, each a default that the
// URI may override. docs/operations.md ("Failover") says why each is
// what it is and what an operator sees during an election.
package mongoclient
