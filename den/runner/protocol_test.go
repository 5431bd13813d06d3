package runner_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/den-project/den/den/runner"
)

// Every message of the node–runner protocol arrives as it was sent, and
// Listen hands the node's functions what the runner says, in order,
// skipping what it cannot read, until the runner's end closes.
func TestProtocolMessagesArriveAsSent(t *testing.T) {
	t.Parallel()
	node, theirs, err := runner.TaskChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	defer theirs.Close()
	spec := runner.Spec{URI: "mongodb://x", Database: "d", Node: "n", Task: "6b0710fe558854c9450058fa", Reuse: true, Queue: []byte{1, 2}}
	buf := make([]byte, 1<<20)
	for _, m := range []runner.Message{runner.RunTask{Spec: spec}, runner.CancelRun{Task: spec.Task}, runner.LiveOutput{Task: spec.Task}} {
		if err := runner.Send(node, m); err != nil {
			t.Fatal(err)
		}
		got, err := runner.Receive(theirs, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("sent %#v, received %#v", m, got)
		}
	}
	said := []runner.Message{runner.Ready{}, runner.Report{Task: spec.Task, Status: 2, Retry: true, Stdout: 5, Stderr: 7}, runner.Done{Task: spec.Task}}
	for _, m := range said {
		if err := runner.Send(theirs, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := theirs.Write([]byte(`{"what":1}`)); err != nil { // no message: skipped
		t.Fatal(err)
	}
	if err := runner.Send(theirs, runner.Report{Task: spec.Task, Status: 1}); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	var heard []runner.Message
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		runner.Listen(node, runner.Listener{
			Ready:  func() { heard = append(heard, runner.Ready{}) },
			Done:   func(task string) { heard = append(heard, runner.Done{Task: task}) },
			Report: func(r runner.Report) { heard = append(heard, r) },
		})
	}()
	select {
	case <-listened:
	case <-time.After(time.Minute):
		t.Fatal("Listen did not return once the runner's end closed")
	}
	want := append(said, runner.Report{Task: spec.Task, Status: 1})
	if !reflect.DeepEqual(heard, want) {
		t.Errorf("the node heard %#v, want %#v", heard, want)
	}
}
