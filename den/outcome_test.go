package den_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// Every ended run records who decided how it ended (outcome) and why
// (outcome_reason), on a real node: the plugin, a program's exit code or
// signal, den's timeout and max_output, cancellation, a malformed task, a
// program command.allow refuses (never retried); and a retried run's
// history entry keeps its own.
func TestEveryEndedRunHasAnOutcome(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	cmdQ := dentest.Queue(t, db, "cmd", command.Name, 8, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	demoQ := dentest.Queue(t, db, "demo", demo.Name, 2, "fifo")
	cases := []struct {
		name    string
		queue   bson.ObjectID
		task    bson.D // parameters
		extra   bson.D // task fields
		status  int64
		outcome string
		reason  string
	}{
		{"demo succeeds", demoQ, bson.D{{Key: "commands", Value: "a"}}, nil, 1, queue.OutcomePlugin, "returned status 1"},
		{"demo fails", demoQ, bson.D{{Key: "commands", Value: "c"}}, nil, 2, queue.OutcomePlugin, "returned status 2"},
		{"exit 0", cmdQ, bson.D{{Key: "shell", Value: "true"}}, nil, 1, queue.OutcomeExitCode, "exited with code 0"},
		{"exit 3", cmdQ, bson.D{{Key: "shell", Value: "exit 3"}}, nil, 2, queue.OutcomeExitCode, "exited with code 3"},
		{"killed", cmdQ, bson.D{{Key: "shell", Value: "kill -9 $$"}}, nil, 2, queue.OutcomeSignal, "SIGKILL"},
		{"timeout", cmdQ, bson.D{{Key: "shell", Value: "sleep 60"}}, bson.D{{Key: "timeout", Value: 1}}, 2, queue.OutcomeTimeout, "timed out after 1s"},
		{"max_output", cmdQ, bson.D{{Key: "shell", Value: "yes"}}, bson.D{{Key: "max_output", Value: 1000}}, 2, queue.OutcomeResourceKilled, "max_output (1000 bytes)"},
		{"cancelled queued", cmdQ, bson.D{{Key: "shell", Value: "true"}}, bson.D{{Key: "cancel", Value: true}}, -5, queue.OutcomeCancelled, "before it started"},
		{"malformed", cmdQ, bson.D{{Key: "shell", Value: "true"}}, bson.D{{Key: "timeout", Value: "soon"}}, 2, queue.OutcomeMalformed, "timeout"},
		{"refused", cmdQ, bson.D{{Key: "command", Value: bson.A{"/usr/sbin/nologin"}}}, bson.D{{Key: "max_retries", Value: 2}, {Key: "retry_delay", Value: 0}}, 2, queue.OutcomeRefused, "command refused"},
		{"retried", cmdQ, bson.D{{Key: "shell", Value: "exit 4"}}, bson.D{{Key: "max_retries", Value: 1}, {Key: "retry_delay", Value: 0}}, 2, queue.OutcomeExitCode, "exited with code 4"},
	}
	ids := make([]bson.ObjectID, len(cases))
	for i, c := range cases {
		ids[i] = dentest.Tasks(t, db, c.queue, c.task)[0]
		if c.extra != nil {
			dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[i]}}, bson.D{{Key: "$set", Value: c.extra}})
		}
	}
	startNode(t, db, "n")
	for i, c := range cases {
		raw := dentest.WaitStatus(t, db, ids[i], c.status)
		outcome, _ := raw.Lookup("outcome").StringValueOK()
		reason, _ := raw.Lookup("outcome_reason").StringValueOK()
		if outcome != c.outcome || !strings.Contains(reason, c.reason) {
			t.Errorf("%s: outcome %q (%q), want %q (containing %q)", c.name, outcome, reason, c.outcome, c.reason)
		}
		if c.name == "refused" && !absentField(raw, "history") {
			// A refusal is permanent: with max_retries 2 it ran once.
			t.Errorf("refused: retried, history %v", raw.Lookup("history"))
		}
		if c.name == "retried" {
			h, _ := raw.Lookup("history").Array().Values()
			var o, r string
			if len(h) == 1 {
				o, _ = h[0].Document().Lookup("outcome").StringValueOK()
				r, _ = h[0].Document().Lookup("reason").StringValueOK()
			}
			if o != queue.OutcomeExitCode || !strings.Contains(r, "code 4") {
				t.Errorf("retried: history %v", h)
			}
		}
	}
	// The outcome is what den task list filters on.
	tasks, err := queue.NewStore(db).ListTasks(dentest.Context(t), queue.TaskFilter{Outcomes: []string{queue.OutcomeTimeout, queue.OutcomeSignal}})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("ListTasks by outcome = %d tasks, %v; want the timeout and the killed one", len(tasks), err)
	}
}

func absentField(raw bson.Raw, field string) bool {
	_, err := raw.LookupErr(field)
	return err != nil
}
