package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A node running as an unprivileged user with the capabilities its unit
// gives it (AmbientCapabilities=CAP_SETUID CAP_SETGID ...) starts a program
// as the task's user: the program has that user, no supplementary group
// and no capability at all. The kernel clears capabilities by itself only
// when root becomes another user; from one unprivileged user to another,
// ambient capabilities would pass on to the program, which could then
// become any user (root included).
func TestUnprivilegedNodeLeavesNoCapabilityToTheProgram(t *testing.T) {
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s, so it cannot start a node-like process with them", CapsUser)
	}
	script := `id -u; id -G; grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status`
	cmd, err := Command(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, User: &Credential{Uid: 65534, Gid: 65534}}, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	// The sandbox runs as uid 64000 (a user of den's own, with no
	// account), holding in its ambient set what den's unit gives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 64000, Gid: 64000, Groups: []uint32{64000, 64001}},
		AmbientCaps: []uintptr{0 /* CAP_CHOWN */, 5 /* CAP_KILL */, 6 /* CAP_SETGID */, 7 /* CAP_SETUID */},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "65534\n65534\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n"
	if string(out) != want {
		t.Fatalf("the program runs as\n%s\nwant\n%s", out, want)
	}
}

// The sandbox enters the working directory as the program's user: a
// directory den's user may enter but the program's user may not is
// refused; also where the sandbox stays as the program's init.
func TestWorkingDirectoryEnteredAsTheProgramsUser(t *testing.T) {
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s", CapsUser)
	}
	for _, init := range []bool{false, true} {
		if init && !HasCaps(CapsNamespaces) {
			continue
		}
		dir := filepath.Join(t.TempDir(), "work")
		if err := os.Mkdir(dir, 0o700); err != nil { // den's user's alone
			t.Fatal(err)
		}
		spec := Spec{Path: "/bin/pwd", Args: []string{"pwd"}, User: &Credential{Uid: 65534, Gid: 65534}, Dir: dir, MountNS: init, PIDNS: init}
		cmd, err := Command(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), spec.Dir) {
			t.Fatalf("init %v: pwd in %s ran as the program's user (%v): %s", init, spec.Dir, err, out)
		}
		for _, d := range []string{filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd, _ = Command(spec, nil)
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != spec.Dir+"\n" {
			t.Fatalf("init %v: pwd: %v, %q", init, err, out)
		}
	}
}

// With NoNetwork the program has a network namespace of its own: no
// interface but a loopback (which is down).
func TestNoNetworkLeavesOnlyADownLoopback(t *testing.T) {
	if !HasCaps(CapsNamespaces) {
		t.Skipf("this test process lacks %s, so it cannot make a network namespace", CapsNamespaces)
	}
	cmd, err := Command(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '"}, Network: NetworkNone, NoNetwork: true}, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "lo\n" {
		t.Fatalf("%v: interfaces %q, want only lo", err, out)
	}
}

// A node that is not root removes a task's temporary directory as the
// task's user, whatever the task left there: here a directory of mode 0
// holding a file, which only the task's user (or root) may open up.
func TestTmpRemovedAsTheTasksUser(t *testing.T) {
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s", CapsUser)
	}
	user := &Credential{Uid: 65534, Gid: 65534}
	tmp, err := NewTmp(user)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := Command(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "mkdir -p d/e && touch d/e/f && chmod 0 d/e d"}, User: user, Dir: tmp}, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := removeTmpAs(tmp, user); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("%s is left: %v", tmp, err)
	}
}

// The whole boundary, as a node that is not root sets it up with the
// capabilities its unit gives it (CapsUser and CapsNamespaces, ambient):
// the program runs as the task's user without any capability (though its
// init, den's sandbox, keeps them), in its own temporary directory and
// PID namespace, with no network, and cannot run the loader on a program
// that is not allowed.
func TestUnprivilegedNodeGivesTheWholeBoundary(t *testing.T) {
	if !HasCaps(CapsUser + " " + CapsNamespaces) {
		t.Skipf("this test process lacks %s %s", CapsUser, CapsNamespaces)
	}
	if LandlockABI() < 6 {
		t.Skipf("this kernel's Landlock ABI is %d; this test checks the boundary as ABI 6 and later make it", LandlockABI())
	}
	user := &Credential{Uid: 65534, Gid: 65534}
	tmp, err := NewTmp(user)
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTmp(tmp, user)
	ld := Loaders("/usr/bin/id")
	if len(ld) == 0 {
		t.Skip("/usr/bin/id is not dynamically linked here")
	}
	script := `id -u; grep -E '^Cap(Prm|Eff|Amb):' /proc/self/status; ls -A /tmp; echo "$TMPDIR"; pwd; ` +
		`tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '; ` + ld[0] + ` /usr/bin/whoami 2>&1 | grep -c 'failed to map'; ` +
		`set -- /proc/[0-9]*; echo $#; true`
	cmd, err := Command(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Exec: []string{"/bin/sh", "/usr/bin/dash", "/usr/bin/id", "/usr/bin/grep", "/usr/bin/ls", "/usr/bin/tail", "/usr/bin/cut", "/usr/bin/tr", "/usr/bin/pwd"}, Landlock: true,
		User: user, Dir: TaskTmp, Tmp: tmp, MountNS: true, PrivateTmp: true, Network: NetworkNone, NoNetwork: true, PIDNS: true, IPCNS: true},
		[]string{"PATH=/usr/bin:/bin", "TMPDIR=" + TaskTmp})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 64000, Gid: 64000}
	cmd.SysProcAttr.AmbientCaps = []uintptr{0 /* CAP_CHOWN */, 5 /* CAP_KILL */, 6 /* CAP_SETGID */, 7 /* CAP_SETUID */, 21 /* CAP_SYS_ADMIN */}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The shell and its init are the only processes it sees.
	want := "65534\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n/tmp\n/tmp\nlo\n1\n2\n"
	if string(out) != want {
		t.Fatalf("the program says\n%s\nwant\n%s", out, want)
	}
}

// A task's temporary directory is its user's, in the node's /tmp, where
// another process of that user could put a symbolic link in its place
// before the sandbox mounts it: the sandbox refuses to follow it.
func TestPrivateTmpFollowsNoSymbolicLink(t *testing.T) {
	if !HasCaps(CapsNamespaces) {
		t.Skipf("this test process lacks %s", CapsNamespaces)
	}
	tmp, err := NewTmp(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", tmp); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp)
	cmd, err := Command(Spec{Path: "/bin/ls", Args: []string{"ls", "/tmp"}, Tmp: tmp, MountNS: true, PrivateTmp: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "passwd") || !strings.Contains(string(out), "open the task's temporary directory") {
		t.Fatalf("the sandbox mounted what the link points to (%v): %s", err, out)
	}
}

// A task's temporary directory left by a process killed before it could
// remove it (a runner's worker killed with SIGKILL) is removed by the next
// NewTmp, whatever the task left in it; one whose maker still runs stays,
// and so does one whose maker's pid is not seen here but which its maker
// holds locked (a maker in another PID namespace: the suite's other
// hosts, a node in a container; red without the lock, where such a
// task's working directory vanished under it).
func TestLeftTmpRemovedOnceItsMakerIsGone(t *testing.T) {
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s", CapsUser)
	}
	user := &Credential{Uid: 65534, Gid: 65534}
	// A maker that is gone: a process started and waited for.
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-test", tmpPrefix, gone.Process.Pid))
	live := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-test", tmpPrefix, os.Getpid()))
	for _, d := range []string{left, live} {
		if err := os.MkdirAll(filepath.Join(d, "d", "e"), 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		os.Chmod(filepath.Join(d, "d"), 0)
		for _, p := range []string{d, filepath.Join(d, "d"), filepath.Join(d, "d", "e")} {
			if err := os.Lchown(p, int(user.Uid), int(user.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Made by a NewTmp whose process's pid, seen from here, is gone.
	held, err := NewTmp(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTmp(held, nil)
	elsewhere := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-elsewhere", tmpPrefix, gone.Process.Pid))
	if err := os.Rename(held, elsewhere); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(elsewhere)
	tmp, err := NewTmp(user)
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTmp(tmp, user)
	if _, err := os.Lstat(elsewhere); err != nil {
		t.Errorf("the directory its maker holds locked was removed: %v", err)
	}
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("the directory of a maker that is gone is left: %v", err)
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("the directory of a maker that runs was removed: %v", err)
	}
}
