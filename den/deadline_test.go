package den_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// end_before: a task whose deadline has passed is not started;
// one still running at its deadline is stopped; both fail with
// expired: true, outcome expired, and are not retried. max_timeouts counts
// timed-out runs apart from other failures: three runs that time out with
// max_timeouts 2 and max_retries 0; a failure beside them is retried under
// max_retries.
func TestDeadlinesAndTimeouts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 4, "fifo", bson.E{Key: "max_termination_time", Value: 1}, bson.E{Key: "retry_delay", Value: 0})
	task := func(shell string, set bson.D) bson.ObjectID {
		id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: shell}})[0]
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}})
		return id
	}
	late := task("echo ran", bson.D{{Key: "end_before", Value: time.Now().Add(-time.Minute)}, {Key: "max_retries", Value: 3}})
	timeouts := task("sleep 60", bson.D{{Key: "timeout", Value: 1}, {Key: "max_timeouts", Value: 2}})
	// Fails (exit 3) the first time, times out the second, succeeds the
	// third: one retry of each kind.
	count := filepath.Join(t.TempDir(), "runs")
	mixed := task(`n=$(cat `+count+` 2>/dev/null || echo 0); echo $((n+1)) > `+count+`; case $n in 0) exit 3;; 1) sleep 60;; esac`,
		bson.D{{Key: "timeout", Value: 2}, {Key: "max_timeouts", Value: 1}, {Key: "max_retries", Value: 1}})
	startNode(t, db, "n")

	raw := dentest.WaitStatus(t, db, late, 2)
	if exp, _ := raw.Lookup("expired").BooleanOK(); !exp || str(raw, "outcome") != queue.OutcomeExpired ||
		strings.Contains(str(raw, "stdout"), "ran") || !strings.Contains(str(raw, "stderr"), "not started before its end_before") {
		t.Errorf("late task: %s", raw)
	}
	// Inserted once the node works (it has failed the late task), with
	// room to claim and start it on a loaded machine: under CI's load a
	// node has taken 23 s from start to its first run, and a task given
	// 20 s from before the node started expired unstarted.
	// Its fields are in the document as inserted: set by an update after
	// the insert, they may come after the running node's claim.
	stopped := dentest.TaskWith(t, db, qid, bson.D{{Key: "shell", Value: "echo started; sleep 60"}},
		bson.E{Key: "end_before", Value: time.Now().Add(20 * time.Second)}, bson.E{Key: "timeout", Value: 600}, bson.E{Key: "max_retries", Value: 3})
	dentest.Eventually(t, 20*time.Second, "the task with an end_before running", func() bool { return status(t, db, stopped) == 0 })
	raw = dentest.WaitStatus(t, db, stopped, 2)
	if exp, _ := raw.Lookup("expired").BooleanOK(); !exp || str(raw, "outcome") != queue.OutcomeExpired ||
		!strings.Contains(str(raw, "stderr"), "still running at its end_before") {
		t.Errorf("stopped task: %s", raw)
	}
	for _, id := range []bson.ObjectID{late, stopped} {
		if a, _ := dentest.Task(t, db, id).Lookup("attempts").AsInt64OK(); a != 0 {
			t.Errorf("expired task %s was retried (%d attempts)", id.Hex(), a)
		}
	}
	raw = dentest.WaitStatus(t, db, timeouts, 2)
	a, _ := raw.Lookup("attempts").AsInt64OK()
	n, _ := raw.Lookup("timeouts").AsInt64OK()
	hist, _ := raw.Lookup("history").ArrayOK()
	h, _ := hist.Values()
	if a != 2 || n != 2 || len(h) != 2 || str(raw, "outcome") != queue.OutcomeTimeout {
		t.Errorf("max_timeouts 2: attempts %d, timeouts %d, %d history entries, outcome %q; want 2, 2, 2, timeout", a, n, len(h), str(raw, "outcome"))
	}
	raw = dentest.WaitStatus(t, db, mixed, 1)
	a, _ = raw.Lookup("attempts").AsInt64OK()
	n, _ = raw.Lookup("timeouts").AsInt64OK()
	hist, _ = raw.Lookup("history").ArrayOK()
	h, _ = hist.Values()
	if a != 2 || n != 1 || len(h) != 2 || str(h[0].Document(), "outcome") != queue.OutcomeExitCode || str(h[1].Document(), "outcome") != queue.OutcomeTimeout {
		t.Errorf("a failure and a timeout: attempts %d, timeouts %d, history %v", a, n, h)
	}
}
