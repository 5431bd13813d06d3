package contain_test

import (
	"os"
	"os/exec"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/contain"
)

// The run proof this process holds says which run it serves: none held, a
// run, idle, two at once (a swap in progress: no run), and a proof is
// never inherited by a program the process starts. Not parallel: it holds
// proofs in the test process itself.
func TestRunProof(t *testing.T) {
	self := os.Getpid()
	if m, held := contain.ProvenRun(self); held {
		t.Fatalf("before any proof: ProvenRun = %q, held", m)
	}
	marker := contain.Marker(bson.NewObjectID().Hex(), bson.NewObjectID().Hex())
	run, err := contain.HoldProof(marker)
	if err != nil {
		t.Fatal(err)
	}
	if m, held := contain.ProvenRun(self); !held || m != marker {
		t.Errorf("holding the proof of %q: ProvenRun = %q, %v", marker, m, held)
	}

	// A program started now does not hold it (close-on-exec): it could
	// otherwise pass for the runner of the run.
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if m, held := contain.ProvenRun(child.Process.Pid); held {
		t.Errorf("a program started by the proof's holder holds it: %q", m)
	}
	child.Process.Kill()
	child.Wait()

	idle, err := contain.HoldProof("")
	if err != nil {
		t.Fatal(err)
	}
	if m, held := contain.ProvenRun(self); !held || m != "" {
		t.Errorf("holding two proofs: ProvenRun = %q, %v; want no run, held", m, held)
	}
	run.Close()
	if m, held := contain.ProvenRun(self); !held || m != "" {
		t.Errorf("idle: ProvenRun = %q, %v; want no run, held", m, held)
	}
	idle.Close()
	if m, held := contain.ProvenRun(self); held {
		t.Errorf("all proofs closed: ProvenRun = %q, held", m)
	}
	if m, held := contain.ProvenRun(1 << 30); held {
		t.Errorf("no such process: ProvenRun = %q, held", m)
	}
}
