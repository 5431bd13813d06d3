// Package countfill fills in the counts (count_todo, count_total) of
// queues inserted without them, or with counts that are not numbers,
// from their tasks: a step of the housekeeping, a batch a round.
package countfill
