package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// A node's test signals say what it did as it does it: the claim of each
// task, each full pass, each step of the housekeeping, each task's end,
// which its document holds by the time the signal comes (read once, not
// polled), and each runner's exit (here a runner per task, which exits
// after it). Tests wait on them instead of polling the database.
func TestSignalsTellClaimsPassesAndEnds(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "signalled", sleepPlugin, 2, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(2, 0)...)
	var sig den.TestSignals
	sig.Init()
	began := time.Now()
	startNode(t, db, "n", func(cfg *den.Config) {
		cfg.Signals = &sig
		cfg.Runner.MaxTasks = 1
	})

	if at := sig.PassDone.Wait(t, "a full pass"); at.Before(began.Add(-time.Minute)) {
		t.Errorf("a full pass began at %s, before the node started (%s)", at, began)
	}
	for _, step := range []string{"counts", "rescue", "sweep"} {
		sig.StepDone.WaitFor(t, "the housekeeping's "+step, func(s string) bool { return s == step })
	}
	claimed := map[bson.ObjectID]bool{}
	for range ids {
		claimed[sig.Claimed.Wait(t, "a claim")] = true
	}
	for _, id := range ids {
		if !claimed[id] {
			t.Errorf("task %s was not signalled as claimed: %v", id.Hex(), claimed)
		}
	}
	for range ids {
		end := sig.TaskEnded.Wait(t, "a task's end")
		if end.Status != 1 || end.Retry {
			t.Errorf("task %s ended with %+v, want status 1", end.Task.Hex(), end)
		}
		if st, _ := dentest.Task(t, db, end.Task).Lookup("status").AsInt64OK(); st != 1 {
			t.Errorf("task %s was signalled as ended while its document says status %d", end.Task.Hex(), st)
		}
	}
	runners := map[int]bool{}
	for _, id := range ids {
		pid, _ := dentest.Task(t, db, id).Lookup("runner", "pid").AsInt64OK()
		runners[int(pid)] = true
	}
	for range ids {
		pid := sig.RunnerExited.Wait(t, "a runner's exit")
		if !runners[pid] {
			t.Errorf("runner %d was signalled as exited; the tasks' runners are %v", pid, runners)
		}
		delete(runners, pid)
	}
}
