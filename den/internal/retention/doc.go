// Package retention removes ended tasks past their queue's retention (or
// the node's default), in batches within the housekeeping's budget of
// writes, by the one node that holds the retention lease.
package retention
