package worker

import (
	"context"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/runner"
)

// The runner's side of the runner-reuse guarantee: a cancel or live request on the task channel
// naming a task that is not the one running now (the previous task, a
// request that arrived between two tasks) never reaches the run of the
// task that runs now; one naming the running task does.
func TestTaskLinkActsOnlyOnTheCurrentTask(t *testing.T) {
	t.Parallel()
	node, theirs, err := runner.TaskChannel()
	if err != nil {
		t.Fatal(err)
	}
	live := make(chan os.Signal, 1)
	link := newTaskLink(theirs, live)
	defer link.close()
	defer node.Close()
	send := func(m runner.Message) {
		t.Helper()
		if err := runner.Send(node, m); err != nil {
			t.Fatal(err)
		}
	}
	// sync sends a task and waits for the link to take it: every message
	// sent before has been handled (one reader, packets in order).
	sync := func() {
		t.Helper()
		send(runner.RunTask{Spec: runner.Spec{Task: bson.NewObjectID().Hex()}})
		select {
		case <-link.next:
		case <-time.After(30 * time.Second):
			t.Fatal("the task link did not take a task")
		}
	}
	quiet := func(what string, ctx context.Context) {
		t.Helper()
		if ctx.Err() != nil {
			t.Errorf("%s: the running task's run was cancelled", what)
		}
		select {
		case <-live:
			t.Errorf("%s: the running task was asked for live output", what)
		default:
		}
	}
	a, b, c := bson.NewObjectID().Hex(), bson.NewObjectID().Hex(), bson.NewObjectID().Hex()

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	link.begin(b, cancelB)
	send(runner.CancelRun{Task: a})
	send(runner.LiveOutput{Task: a})
	sync()
	quiet("requests for the previous task", ctxB)
	send(runner.LiveOutput{Task: b})
	select {
	case <-live:
	case <-time.After(30 * time.Second):
		t.Fatal("a live request for the running task did not reach it")
	}
	send(runner.CancelRun{Task: b})
	select {
	case <-ctxB.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a cancel for the running task did not reach it")
	}
	link.end()

	// Between tasks: requests for the task just over, then the next task.
	send(runner.CancelRun{Task: b})
	send(runner.LiveOutput{Task: b})
	sync()
	ctxC, cancelC := context.WithCancel(context.Background())
	defer cancelC()
	link.begin(c, cancelC)
	send(runner.CancelRun{Task: b})
	send(runner.LiveOutput{Task: b})
	send(runner.CancelRun{Task: ""})
	sync()
	quiet("requests for the task before", ctxC)
}
