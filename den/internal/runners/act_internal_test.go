package runners

import (
	"syscall"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// The node's side of the runner-reuse guarantee: act does nothing to a pooled runner that runs
// another task than the one named (it moved on to its next task, or is
// idle): no cancel or live message on its task channel, no signal; only
// the task it runs now is acted on.
func TestActReachesOnlyTheTaskARunnerRunsNow(t *testing.T) {
	t.Parallel()
	victim, started, exited := dentest.GroupLeader(t)
	nodeEnd, runnerEnd, err := runner.TaskChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer runnerEnd.Close()
	old, cur := bson.NewObjectID(), bson.NewObjectID()
	n := &Pool{procs: newProcTable()}
	proc := &runnerProc{pid: victim.Process.Pid, queue: bson.NewObjectID(), ch: nodeEnd, ready: true, task: cur, served: 2}
	n.procs.byPID[proc.pid] = proc
	// The runner field the old task recorded: the same runner, its token.
	r := queue.RunnerInfo{PID: proc.pid, Started: started, Token: bson.NewObjectID()}
	for _, what := range []runnerAct{actCancel, actLive, actKill} {
		if n.act(old, r, what) {
			t.Errorf("act %d on the previous task reached the runner now running another", what)
		}
	}
	// Idle between tasks: nothing reaches it either.
	proc.task = bson.ObjectID{}
	for _, what := range []runnerAct{actCancel, actLive, actKill} {
		if n.act(cur, r, what) {
			t.Errorf("act %d reached an idle runner", what)
		}
	}
	// Retired (channel closed, so acts are signals): still only its task.
	proc.task = cur
	proc.retireLocked()
	if n.act(old, r, actKill) || n.act(old, r, actCancel) {
		t.Error("a signal for the previous task reached a retired runner running another")
	}
	select {
	case <-exited:
		t.Fatalf("the runner was signalled: %v", victim.ProcessState)
	default:
	}
	// Its own task is acted on; the first message on its channel is the
	// one for it: nothing for the previous task was sent before.
	nodeEnd2, runnerEnd2, err := runner.TaskChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer runnerEnd2.Close()
	defer nodeEnd2.Close()
	first := *proc
	first.ch, first.closed, first.task = nodeEnd2, false, cur
	n.procs.byPID[proc.pid] = &first
	for _, what := range []runnerAct{actCancel, actLive} {
		if n.act(old, r, what) {
			t.Errorf("act %d on the previous task reached the runner", what)
		}
	}
	if !n.act(cur, r, actLive) {
		t.Fatal("a live request for the task the runner runs was not sent")
	}
	select {
	case <-exited:
		t.Fatalf("the runner was signalled: %v", victim.ProcessState)
	default:
	}
	// Sent before: a non-blocking read has it, or nothing was sent.
	if err := syscall.SetNonblock(int(runnerEnd2.Fd()), true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	m, err := runner.Receive(runnerEnd2, buf)
	if err != nil {
		t.Fatal(err)
	}
	if live, ok := m.(runner.LiveOutput); !ok || live.Task != cur.Hex() {
		t.Errorf("the runner's first message is %+v, want only a live request for its task %s", m, cur.Hex())
	}
}
