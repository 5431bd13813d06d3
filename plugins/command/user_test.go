package command_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// taskUser is the user the tests' tasks run as.
const taskUser = "nobody"

// asTaskUser returns p with its programs running as taskUser.
func asTaskUser(p command.Policy) command.Policy {
	p.User, p.UserOptional = taskUser, false
	return p
}

// needSetUser skips where den could not run programs as another user: the
// tests run as root on the development machine and CI, where it can.
func needSetUser(t *testing.T) {
	t.Helper()
	if !sandbox.HasCaps(sandbox.CapsUser) {
		t.Skipf("this test process lacks %s, so it cannot run programs as another user", sandbox.CapsUser)
	}
}

// The task's program, and what it starts, run as command.user: its user,
// its group, no supplementary group (root's would open root-group files)
// and no capability left, whatever den itself holds.
func TestTaskRunsAsItsOwnUser(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	raw := runTask(t, asTaskUser(sh), bson.D{{Key: "shell", Value: `id -u; id -g; id -G; sh -c 'id -u'; grep -E '^(Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):' /proc/self/status`}})
	want := "65534\n65534\n65534\n65534\n" +
		"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" +
		"CapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != want {
		t.Fatalf("status %d, stdout %q, want %q; stderr %q", st, text(t, raw, "stdout"), want, text(t, raw, "stderr"))
	}
}

// A task cannot read den's configuration: a file of den's user with mode
// 0600 (as the unit's documentation sets it), in a directory anyone may
// enter, so that only the file's own mode stops the read.
func TestTaskCannotReadDensConfiguration(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	dir := hostDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "den.yaml")
	if err := os.WriteFile(conf, []byte("mongo:\n  uri: mongodb://den:secret@db/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := runTask(t, asTaskUser(sh), bson.D{{Key: "command", Value: bson.A{"/usr/bin/cat", conf}}})
	if stdout := text(t, raw, "stdout"); strings.Contains(stdout, "secret") {
		t.Fatalf("the task read den's configuration: %q", stdout)
	}
	if stderr := text(t, raw, "stderr"); !strings.Contains(stderr, "Permission denied") {
		t.Fatalf("stderr %q, want the kernel's refusal", stderr)
	}
}

// A task cannot signal den: kill -0 of the runner's pid (here the test
// process, which runs the runner) is refused, and so is a real signal
// (SIGURG, which the Go runtime shrugs off, so that a failure of this test
// does not kill the test process; the kernel checks every signal alike).
// In the task's own PID namespace there is no such process; in the node's,
// the user check refuses it.
func TestTaskCannotSignalTheNode(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	pid := strconv.Itoa(os.Getpid())
	for _, shared := range []bool{false, true} {
		p := asTaskUser(sh)
		p.SharedPIDs = shared
		refusal := "No such process"
		if shared {
			refusal = "Operation not permitted"
		}
		raw := runTask(t, p, bson.D{{Key: "shell", Value: "kill -0 " + pid + " && echo signalled; kill -URG " + pid + " && echo signalled; true"}})
		if stdout := text(t, raw, "stdout"); stdout != "" {
			t.Fatalf("shared pids %v: the task signalled the node: %q", shared, stdout)
		}
		if stderr := text(t, raw, "stderr"); strings.Count(stderr, refusal) != 2 {
			t.Fatalf("shared pids %v: stderr %q, want two refusals (%s)", shared, stderr, refusal)
		}
	}
}

// As its own user, a task still runs, writes its output, is timed out
// (SIGTERM ignored, then SIGKILL, across the change of user), and what it
// left running is stopped, in its own PID namespace and in the node's.
func TestTaskUserTimedOutAndStopped(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared pids %v", shared), func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(sh)
			p.SharedPIDs = shared
			mark := sleepMark(60)
			raw, _ := runTimingOut(t, p, bson.D{{Key: "shell", Value: `trap "" TERM; id -u; ` + startChild(mark)}},
				"started", bson.E{Key: "max_termination_time", Value: 1})
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !raw.Lookup("timed_out").Boolean() {
				t.Fatalf("status %d timed_out %v stderr %q", st, raw.Lookup("timed_out"), text(t, raw, "stderr"))
			}
			if stdout := text(t, raw, "stdout"); stdout != "65534\nstarted\n" {
				t.Fatalf("stdout %q (the child must have started within the timeout)", stdout)
			}
			awaitNoneLeft(t, "the task user's child", mark)
		})
	}
}

// Without the capabilities to change user, the plugin stays off unless
// the configuration says the user boundary is optional; command.user
// must name another user than den's own, and one that exists.
func TestTaskUserNeedsPrivilegesUnlessOptional(t *testing.T) {
	t.Parallel()
	base := command.Policy{Enabled: true, Allow: []string{"/usr/bin/true"}}
	self := strconv.Itoa(os.Geteuid()) + ":" + strconv.Itoa(os.Getegid())
	for _, tc := range []struct {
		name     string
		user     string
		optional bool
		setUser  bool
		refused  string
		asUser   bool
	}{
		{name: "privileged", user: taskUser, setUser: true, asUser: true},
		{name: "unprivileged", user: taskUser, refused: "den may not run programs as command.user"},
		{name: "unprivileged, optional", user: taskUser, optional: true},
		{name: "no user", refused: "command.user is not set"},
		{name: "no user, optional", optional: true, setUser: true},
		{name: "unknown user", user: "no-such-user-here", setUser: true, optional: true, refused: "look up user"},
		{name: "den's own user", user: self, setUser: true, optional: true, refused: "den's own user"},
	} {
		p := base
		p.User, p.UserOptional = tc.user, tc.optional
		if tc.user == self && os.Geteuid() == 0 {
			continue // root's uid is refused earlier, as root
		}
		e, err := p.Boundary(command.Machine{LandlockABI: 7, SetUser: tc.setUser})
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.refused)
			}
			continue
		}
		if err != nil || (e.User != nil) != tc.asUser {
			t.Errorf("%s: user %v, error %v", tc.name, e.User, err)
		}
	}
}
