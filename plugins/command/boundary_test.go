package command_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// copyFile copies an executable to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Skipf("this machine has no %s: %v", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// toolDir copies programs of /usr/bin into a new directory, for a policy
// that allows that whole directory and nothing else.
func toolDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := hostDir(t)
	for _, n := range names {
		copyFile(t, filepath.Join("/usr/bin", n), filepath.Join(dir, n))
	}
	return dir
}

func needLandlock(t *testing.T) {
	t.Helper()
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock, so the execute boundary cannot be checked here")
	}
}

// Allowed programs that start other programs (find -exec, sed's e command,
// make, env) cannot reach a program outside command.allow: the kernel
// refuses the exec, whatever the target is called. The allowed programs
// are a whole allowed directory; a copy of dash under another name, in a
// directory that is not allowed, is refused too, also when all of /usr/bin
// is allowed.
func TestKernelRefusesExecOutsideAllowlist(t *testing.T) {
	t.Parallel()
	needLandlock(t)
	dir := toolDir(t, "find", "sed", "make", "env", "cat")
	fake := filepath.Join(hostDir(t), "notashell")
	copyFile(t, "/usr/bin/dash", fake)
	tools := command.Policy{Enabled: true, UserOptional: true, Allow: []string{dir + "/"}, Env: []string{"PATH"}}
	usrBin := command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/usr/bin/"}, Env: []string{"PATH"}}
	cases := []struct {
		name   string
		policy command.Policy
		argv   bson.A
		stdin  string
		// refusal is how the program reports the kernel's EACCES (sed's
		// popen does not pass the errno on).
		refusal string
	}{
		{"find -exec /bin/sh", tools, bson.A{dir + "/find", dir + "/find", "-exec", "/bin/sh", "-c", "echo pwned", ";"}, "", "/bin/sh': Permission denied"},
		{"sed e command", tools, bson.A{dir + "/sed", "-n", "1e echo pwned"}, "x\n", "error in subprocess"},
		{"make -f /dev/stdin", tools, bson.A{dir + "/make", "-f", "/dev/stdin"}, "all:\n\t@echo pwned; echo pwned\n", "Permission denied"},
		{"env sh", tools, bson.A{dir + "/env", "sh", "-c", "echo pwned"}, "", "'sh': Permission denied"},
		{"copy of dash under another name", tools, bson.A{dir + "/find", fake, "-exec", "{}", "-c", "echo pwned", ";"}, "", "notashell': Permission denied"},
		{"copy of dash under another name, /usr/bin/ allowed", usrBin, bson.A{"/usr/bin/find", fake, "-exec", "{}", "-c", "echo pwned", ";"}, "", "notashell': Permission denied"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := runTask(t, tc.policy, bson.D{{Key: "command", Value: tc.argv}, {Key: "stdin", Value: tc.stdin}})
			stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
			if strings.Contains(stdout, "pwned") {
				t.Fatalf("the program outside the allowlist ran: stdout %q", stdout)
			}
			if !strings.Contains(stderr, tc.refusal) {
				t.Fatalf("stderr %q does not show the kernel's refusal (%q)", stderr, tc.refusal)
			}
		})
	}
	// The same boundary lets allowed programs start each other.
	t.Run("allowed programs still run each other", func(t *testing.T) {
		t.Parallel()
		raw := runTask(t, tools, bson.D{{Key: "command", Value: bson.A{dir + "/env", dir + "/cat"}}, {Key: "stdin", Value: "ok\n"}})
		if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "ok\n" {
			t.Fatalf("status %d stdout %q stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
		}
	})
}

// A task that sets a variable outside command.env_allow is not run: status
// 2 and the reason in stderr. These variables would turn tar, make,
// openssl or any dynamically linked program into a shell.
func TestTaskEnvOutsideAllowlistRefused(t *testing.T) {
	t.Parallel()
	policy := command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/usr/bin/"}, Env: []string{"PATH"}, EnvAllow: []string{"LANG", "LC_*"},
		Landlock: command.LandlockOptional}
	for _, name := range []string{"TAR_OPTIONS", "MAKEFLAGS", "MAKEFILES", "OPENSSL_CONF", "LD_PRELOAD", "DEN_RUN"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := runTask(t, policy, bson.D{{Key: "command", Value: bson.A{"/usr/bin/touch", "/dev/null"}},
				{Key: "env", Value: bson.D{{Key: "LC_ALL", Value: "C"}, {Key: name, Value: "x"}}}})
			stderr := text(t, raw, "stderr")
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !strings.Contains(stderr, "command refused") || !strings.Contains(stderr, name) {
				t.Fatalf("status %d stderr %q", st, stderr)
			}
			if raw.Lookup("exit_code").Type != 0 {
				t.Fatalf("the program ran (exit_code %v)", raw.Lookup("exit_code"))
			}
		})
	}
}

// A program that writes more than max_output is stopped; the stored
// output ends with a line saying where it was cut, and the task fails with
// the reason in stderr.
func TestOutputCapStopsCommand(t *testing.T) {
	t.Parallel()
	const limit = 100000
	raw := runTask(t, sh, bson.D{{Key: "command", Value: bson.A{"/usr/bin/yes"}}}, bson.E{Key: "max_output", Value: limit})
	stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
	cut := "den: stdout was cut at 100000 bytes (max_output); the rest was discarded\n"
	if len(stdout) != limit+len(cut) || !strings.HasSuffix(stdout, cut) || strings.Count(stdout, "y\n") != limit/2 {
		t.Fatalf("stdout: %d bytes, ends %q", len(stdout), stdout[max(0, len(stdout)-120):])
	}
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !strings.Contains(stderr, "passed max_output (100000 bytes)") {
		t.Fatalf("status %d stderr %q", st, stderr)
	}
}

// The program runs with no_new_privs (a set-user-ID program cannot raise
// its privileges), and the sandbox's own variable never reaches it: its
// environment is exactly what the policy gives.
func TestProgramRunsWithNoNewPrivsAndOnlyItsEnvironment(t *testing.T) {
	t.Parallel()
	raw := runTask(t, sh, bson.D{{Key: "shell", Value: "grep NoNewPrivs /proc/self/status; env"}, {Key: "env", Value: bson.D{{Key: "GREETING", Value: "hi"}}}})
	lines := strings.Split(strings.TrimSpace(text(t, raw, "stdout")), "\n")
	if len(lines) == 0 || lines[0] != "NoNewPrivs:\t1" {
		t.Fatalf("stdout %q: no_new_privs is not set", lines)
	}
	// dash sets PWD; TMPDIR is the task's own temporary directory.
	env := slices.DeleteFunc(lines[1:], func(l string) bool { return strings.HasPrefix(l, "PWD=") || strings.HasPrefix(l, "TMPDIR=") })
	slices.Sort(env)
	if want := []string{"GREETING=hi", "PATH=" + os.Getenv("PATH")}; !slices.Equal(env, want) {
		t.Fatalf("environment %q, want %q", env, want)
	}
}
