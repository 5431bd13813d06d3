// Package bulk cancels and retries many tasks at once, one by one with the
// operator's single-task writes (queue.OperatorStore's SetCancel and
// RetryEnded), each conditional on the task as it stands: what den task
// cancel and den task retry do (den/cli), and the task list's bulk action
// (den/web). It is written once here so that both do the same: which
// outcome counts as done, what is left alone, and where a failure stops.
package bulk
