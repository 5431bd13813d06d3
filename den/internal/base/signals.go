package base

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/testsignal"
)

// Signals tell a test what a node did as it does it, so that the test
// waits for that instead of polling the database (package testsignal, in
// the manner of River's): each task it claimed (before the hand-over),
// each full pass that succeeded (when it began), each step of the
// housekeeping that did its work (its name, as Ready and the node's
// progress name it: counts, oldest, rescue, sweep, stats, schedules,
// retention), each end of a task that its runners reported (by then
// the task's document holds the result), and each runner process that
// exited (its pid), once the node has reaped it and done what its exit
// asks (put its task back, rescue it; nothing once the node's Run has
// returned). A test sets den.Config.Signals and calls Init before the node
// starts; production leaves den.Config.Signals nil, and signalling then
// costs a nil check.
type Signals struct {
	Claimed      testsignal.Signal[bson.ObjectID]
	PassDone     testsignal.Signal[time.Time]
	StepDone     testsignal.Signal[string]
	TaskEnded    testsignal.Signal[TaskEnd]
	RunnerExited testsignal.Signal[int]
}

// TaskEnd is a task's end as its runner reported it: its status (0 when
// the run found the task no longer its own), and whether it was put back
// for a retry.
type TaskEnd struct {
	Task   bson.ObjectID
	Status int
	Retry  bool
}

// Init turns every signal on.
func (s *Signals) Init() {
	s.Claimed.Init()
	s.PassDone.Init()
	s.StepDone.Init()
	s.TaskEnded.Init()
	s.RunnerExited.Init()
}

func (s *Signals) NoteClaimed(id bson.ObjectID) {
	if s != nil {
		s.Claimed.Signal(id)
	}
}

func (s *Signals) NotePassDone(began time.Time) {
	if s != nil {
		s.PassDone.Signal(began)
	}
}

func (s *Signals) NoteStepDone(name string) {
	if s != nil {
		s.StepDone.Signal(name)
	}
}

func (s *Signals) NoteTaskEnded(e TaskEnd) {
	if s != nil {
		s.TaskEnded.Signal(e)
	}
}

func (s *Signals) NoteRunnerExited(pid int) {
	if s != nil {
		s.RunnerExited.Signal(pid)
	}
}
