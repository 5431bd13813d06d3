package queue

import "go.mongodb.org/mongo-driver/v2/bson"

// Outcome says who decided how a run ended, and why: it tells a bug in a task or plugin (plugin, exit_code, signal,
// malformed) from an infrastructure failure (runner_died, node_died) and
// from den's own limits (timeout, resource_killed, expired, cancelled)
// and from a task the plugin will not run on this node (refused).
// Every ended run records one: in the task (outcome, outcome_reason) and
// in its history entry (outcome, reason). A Perl Disbatch node ignores
// both fields.
type Outcome struct {
	Kind   string
	Reason string
}

// The task fields of an outcome.
const (
	FieldOutcome       = "outcome"
	FieldOutcomeReason = "outcome_reason"
)

// The kinds of outcome.
const (
	// OutcomePlugin: the plugin returned the status (or an error, or
	// panicked).
	OutcomePlugin = "plugin"
	// OutcomeExitCode: a program's exit code decided the status (the
	// command plugin).
	OutcomeExitCode = "exit_code"
	// OutcomeSignal: a program was killed by a signal den did not send.
	OutcomeSignal = "signal"
	// OutcomeTimeout: the run passed its timeout and den stopped it.
	OutcomeTimeout = "timeout"
	// OutcomeCancelled: cancel: true stopped the run, or kept it from
	// starting.
	OutcomeCancelled = "cancelled"
	// OutcomeRunnerDied: the task runner died or was stopped by someone
	// else than den.
	OutcomeRunnerDied = "runner_died"
	// OutcomeNodeDied: the node that held the task stopped (a dead node, a
	// claim no runner took up, a task reaped as orphaned).
	OutcomeNodeDied = "node_died"
	// OutcomeResourceKilled: the run passed a resource limit (max_output)
	// and den stopped it.
	OutcomeResourceKilled = "resource_killed"
	// OutcomeExpired: the task's deadline passed.
	OutcomeExpired = "expired"
	// OutcomeMalformed: the task document could not be read; it never ran.
	OutcomeMalformed = "malformed"
	// OutcomeLeaseLost: the run's runner could not renew its lease (no
	// heartbeat of its landed for its lease, less the time to stop) and
	// stopped the run, so that no other node's attempt overlaps it.
	OutcomeLeaseLost = "lease_lost"
	// OutcomeRefused: the plugin refused the task (plugins.Refuse): it
	// asks what the node's configuration does not allow, such as a program
	// outside command.allow. A refusal is permanent: the run ends failed
	// and is never retried.
	OutcomeRefused = "refused"
)

// Outcomes lists every kind, for validating a filter.
var Outcomes = []string{OutcomePlugin, OutcomeExitCode, OutcomeSignal, OutcomeTimeout, OutcomeCancelled,
	OutcomeRunnerDied, OutcomeNodeDied, OutcomeResourceKilled, OutcomeExpired, OutcomeMalformed, OutcomeLeaseLost, OutcomeRefused}

// set returns the task fields of an outcome ($set).
func (o Outcome) set() bson.D {
	if o.Kind == "" {
		return nil
	}
	return bson.D{{Key: FieldOutcome, Value: o.Kind}, {Key: FieldOutcomeReason, Value: o.Reason}}
}

// Fields returns the task fields of an outcome, for a result's Extra.
func (o Outcome) Fields() bson.D { return o.set() }
