package dentest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

// TestEventuallyWaitsPastWithinAndGivesUpAtTheDeadline runs a wait that
// never ends in a child test binary with a 4-second -timeout: it must
// log that it passed its within, fail before go test's own panic, and say
// what it waited for.
func TestEventuallyWaitsPastWithinAndGivesUpAtTheDeadline(t *testing.T) {
	t.Parallel()
	if os.Getenv("DENTEST_CHILD") == "forever" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChildWaitsForever$", "-test.timeout", "4s", "-test.v")
	cmd.Env = append(os.Environ(), "DENTEST_CHILD=forever", dentest.EnvURI+"=mongodb://127.0.0.1:1/")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the child passed a wait that never ends:\n%s", out)
	}
	for _, want := range []string{
		"still waiting after",
		"gave up at the test binary's deadline",
		"waiting for: the impossible",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "panic: test timed out") {
		t.Errorf("go test's timeout fired before the wait gave up:\n%s", out)
	}
	if took < 2*time.Second {
		t.Errorf("the child gave up after %s, before its deadline (3 s of a 4 s timeout)", took)
	}
}

// TestChildWaitsForever is the child of the test above; alone it passes.
func TestChildWaitsForever(t *testing.T) {
	if os.Getenv("DENTEST_CHILD") != "forever" {
		t.Skip("the child of TestEventuallyWaitsPastWithinAndGivesUpAtTheDeadline")
	}
	dentest.Eventually(t, time.Second, "the impossible", func() bool { return false })
}
