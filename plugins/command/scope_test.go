package command_test

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// needScoping skips where the kernel has no Landlock scoping (ABI 6).
func needScoping(t *testing.T) {
	t.Helper()
	if abi := sandbox.LandlockABI(); abi < 6 {
		t.Skipf("this kernel's Landlock ABI is %d: signal and abstract unix socket scoping need 6", abi)
	}
}

// reachPolicy allows the reach helper (testdata/reach) and nothing else.
func reachPolicy(t *testing.T) (command.Policy, string) {
	helper := buildHelper(t, "reach")
	return command.Policy{Enabled: true, UserOptional: true, Allow: []string{helper}}, helper
}

// A task of one queue cannot signal a task of another, though both run
// as the same user (so the kernel's user check lets it): each task is a
// Landlock domain of its own, scoped for signals. This is what holds in
// the node's PID namespace (command.shared_pids); in a task's own, the
// other task's processes do not even exist for it
// (TestTasksOfOneUserKeptApart).
func TestTaskCannotSignalAnotherQueuesTask(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needScoping(t)
	gate := hostDir(t)
	if err := os.Chmod(gate, 0o777); err != nil {
		t.Fatal(err)
	}
	pidFile, goOn := filepath.Join(gate, "pid"), filepath.Join(gate, "go")
	done := make(chan bson.Raw, 1)
	go func() {
		p := asTaskUser(sh)
		p.SharedPIDs = true
		done <- runTask(t, p, bson.D{{Key: "shell", Value: `echo $$ > ` + pidFile + `; while [ ! -e ` + goOn + ` ]; do sleep 0.05; done`}})
	}()
	var pid string
	dentest.Eventually(t, 30*time.Second, "the first task is running", func() bool {
		select {
		case raw := <-done:
			t.Fatalf("the first task ended early: stderr %q", text(t, raw, "stderr"))
		default:
		}
		b, err := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	policy, helper := reachPolicy(t)
	attacker := asTaskUser(policy)
	attacker.SharedPIDs = true
	raw := runTask(t, attacker, bson.D{{Key: "command", Value: bson.A{helper, "signal:" + pid}}})
	if stdout := text(t, raw, "stdout"); stdout != "signal:"+pid+": operation not permitted\n" {
		t.Errorf("stdout %q, want the signal refused; stderr %q", stdout, text(t, raw, "stderr"))
	}
	os.WriteFile(goOn, nil, 0o644)
	if raw := <-done; raw.Lookup("status").AsInt64() != 1 {
		t.Fatalf("the first task did not run to its end: stderr %q", text(t, raw, "stderr"))
	}
}

// A task cannot signal den, even where it runs as den's own user
// (command.user_optional): in the node's PID namespace Landlock's scoping
// holds under the user check; in the task's own, den's processes do not
// exist for it.
func TestTaskCannotSignalTheNodeAsItsUser(t *testing.T) {
	t.Parallel()
	needScoping(t)
	policy, helper := reachPolicy(t)
	pid := strconv.Itoa(os.Getpid())
	for _, shared := range []bool{false, true} {
		p := policy
		p.SharedPIDs = shared
		want := "signal:" + pid + ": no such process\n"
		if shared {
			want = "signal:" + pid + ": operation not permitted\n"
		}
		raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "signal:" + pid}}})
		if stdout := text(t, raw, "stdout"); stdout != want {
			t.Fatalf("shared pids %v: stdout %q, want %q; stderr %q", shared, stdout, want, text(t, raw, "stderr"))
		}
	}
}

// A task cannot connect to an abstract unix socket outside its sandbox
// (here one the node's process listens on): such sockets have no owner
// or mode, so only Landlock's scoping refuses it.
func TestTaskCannotConnectToAbstractSockets(t *testing.T) {
	t.Parallel()
	needScoping(t)
	needSetUser(t)
	mark := make([]byte, 8)
	rand.Read(mark)
	name := "den-test-" + hex.EncodeToString(mark)
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	policy, helper := reachPolicy(t)
	for _, p := range []command.Policy{policy, asTaskUser(policy)} {
		raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "abstract:" + name}}})
		if stdout := text(t, raw, "stdout"); stdout != "abstract:"+name+": operation not permitted\n" {
			t.Fatalf("user %q: stdout %q, want the connection refused; stderr %q", p.User, stdout, text(t, raw, "stderr"))
		}
	}
}
