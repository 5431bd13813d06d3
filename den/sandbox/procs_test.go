package sandbox

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/contain"
)

// Programs run from this test binary enter their sandbox here, as in
// den's own main.
func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// Where no pids cgroup is given, the sandbox limits the program's
// processes with RLIMIT_NPROC, above what its user runs already: a shell
// that forks far past max_processes sees fork fail at it. Root is exempt
// from RLIMIT_NPROC, so as root the program runs as nobody, as tasks of a
// node running as an unprivileged user do.
func TestProcessLimitByRLIMITNPROC(t *testing.T) {
	const limit = 10
	script := `i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & echo started; i=$((i+1)); done`
	cmd, err := Command(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, MaxProcesses: limit}, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	cmd.Wait()
	started := strings.Count(out.String(), "started\n")
	if started == 0 || started > limit-1 || !strings.Contains(out.String(), "Cannot fork") {
		t.Fatalf("the shell started %d processes (want at most %d: with itself, max_processes %d) and said:\n%s", started, limit-1, limit, out.String())
	}
	t.Logf("the shell started %d processes before fork failed", started)
}

// In a PID namespace of its own, where the sandbox stays as the program's
// init, max_processes still counts the program and what it starts, and
// only them: by pids.max of the run's pids cgroup (which the init leaves
// once the program runs in it) and, without one, by RLIMIT_NPROC of the
// program's user (the init stays den's user).
func TestProcessLimitInPIDNamespace(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s", CapsUser)
	}
	const limit = 10
	script := `i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & echo started; i=$((i+1)); done`
	for _, mechanism := range []string{"pids cgroup", "RLIMIT_NPROC"} {
		// One after the other: RLIMIT_NPROC counts the other's processes.
		t.Run(mechanism, func(t *testing.T) {
			spec := initSpec(script)
			spec.MaxProcesses, spec.User = limit, &Credential{Uid: 65534, Gid: 65534}
			if mechanism == "pids cgroup" {
				root, err := contain.DetectPidsV1()
				if err != nil {
					t.Skipf("no pids cgroup here: %v", err)
				}
				dir := contain.RunCgroup(root, "test", strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
				if err := contain.LimitPids(dir, limit); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { contain.KillCgroup(dir); contain.RemoveCgroup(dir, 10*time.Second) })
				spec.PidsCgroup = dir
			}
			cmd, err := Command(spec, []string{"PATH=/usr/bin:/bin"})
			if err != nil {
				t.Fatal(err)
			}
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			end, _ := cmd.Exit()
			t.Logf("sandbox: %v; program ended %#x", err, uint32(end.Status))
			// With itself, the shell may have max_processes. In a pids
			// cgroup, the init's forking thread is in the cgroup until
			// the program has been executed and the init has moved it
			// out: a program that forks at once may find one fewer for
			// that moment (seen beside a loaded machine), never more.
			started := strings.Count(string(out), "started\n")
			least := limit - 1
			if mechanism == "pids cgroup" {
				least = limit - 2
			}
			if started < least || started > limit-1 || !strings.Contains(string(out), "Cannot fork") {
				t.Fatalf("the shell started %d processes (want %d to %d: with itself, max_processes %d) and said:\n%s", started, least, limit-1, limit, out)
			}
		})
	}
}
