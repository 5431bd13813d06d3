// Package chore rations the housekeeping's work so that it never holds
// up a claim: a round's Budget of writes (rescues, sweeps' rewrites,
// retention's removals), and the Pace of a periodic chore, which keeps
// it within its share of the database's time.
package chore
