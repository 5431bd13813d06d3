package contain_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/testdeadline"

	"github.com/den-project/den/den/internal/contain"
)

// start starts sh -c script with extra environment and returns it; the
// test reaps it.
func start(t *testing.T, script string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// waitStarted waits for a script to create ready (after its traps are
// set).
func waitStarted(t *testing.T, ready string) {
	t.Helper()
	testdeadline.Wait(t, 10*time.Millisecond, "the script to start", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
}

func live(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// Stop ends a process that ignores SIGTERM with SIGKILL once the grace
// time is over, and one that honours SIGTERM at once.
func TestStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
	}{
		{"honours SIGTERM", `touch "$READY"; exec sleep 100`},
		{"ignores SIGTERM", `trap "" TERM; touch "$READY"; exec sleep 100`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ready := filepath.Join(t.TempDir(), "ready")
			cmd := start(t, tc.script, "READY="+ready)
			// The trap is set (and survives exec) once the file exists.
			waitStarted(t, ready)
			pid := int32(cmd.Process.Pid)
			reaped := make(chan struct{})
			go func() { cmd.Wait(); close(reaped) }()
			n := contain.Stop(context.Background(), func() []int32 {
				if live(int(pid)) {
					return []int32{pid}
				}
				return nil
			}, 300*time.Millisecond, nil)
			if n != 1 {
				t.Errorf("Stop signalled %d processes, want 1", n)
			}
			select {
			case <-reaped:
			case <-testdeadline.GiveUp():
				t.Fatal("the process was not stopped")
			}
			if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); tc.name == "ignores SIGTERM" && ws.Signal() != syscall.SIGKILL {
				t.Errorf("ended by %v, want SIGKILL", ws)
			}
		})
	}
}

// Marked finds exactly the processes that carry a run's marker, and
// Descendants finds a process's children and grandchildren.
func TestMarkedAndDescendants(t *testing.T) {
	t.Parallel()
	marker := contain.Marker("task", "token-"+strconv.Itoa(os.Getpid()))
	mine := start(t, "sleep 100 & exec sleep 100", contain.EnvRun+"="+marker)
	other := start(t, "exec sleep 100", contain.EnvRun+"="+marker+"x")
	var found []int32
	if !testdeadline.Until(50*time.Millisecond, func() bool {
		found = contain.Marked(context.Background(), marker, 0)
		return len(found) == 2
	}) {
		t.Fatalf("Marked found %v, want the shell and its child", found)
	}
	for _, p := range found {
		if int(p) == other.Process.Pid {
			t.Errorf("Marked found a process with another marker")
		}
	}
	// Both ways of walking the tree: the children files, and the scan of
	// all of /proc where a kernel has none.
	for _, scan := range []bool{false, true} {
		restore := contain.ForceScan(scan)
		desc := contain.Descendants(context.Background(), int32(os.Getpid()))
		skipped := contain.Descendants(context.Background(), int32(os.Getpid()), int32(mine.Process.Pid))
		restore()
		has := func(list []int32, pid int32) bool { return slices.Contains(list, pid) }
		// found holds mine's shell and its child: a child and a grandchild.
		for _, p := range append(found, int32(other.Process.Pid)) {
			if !has(desc, p) {
				t.Errorf("scan %v: Descendants %v lacks %d", scan, desc, p)
			}
		}
		for _, p := range found {
			if has(skipped, p) {
				t.Errorf("scan %v: skipping %d kept %d: %v", scan, mine.Process.Pid, p, skipped)
			}
		}
		if !has(skipped, int32(other.Process.Pid)) {
			t.Errorf("scan %v: skipping one child dropped another: %v", scan, skipped)
		}
	}
}

// A process that find no longer returns once signalled (as the run marker
// search stops seeing a process whose memory is released while it exits)
// is still waited for, and killed if it does not go: Stop returns only
// once every process it signalled has exited.
func TestStopWaitsForWhatItSignalled(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := start(t, `trap "" TERM; touch "$READY"; exec sleep 100`, "READY="+ready)
	waitStarted(t, ready)
	pid := int32(cmd.Process.Pid)
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	calls := 0
	n := contain.Stop(context.Background(), func() []int32 {
		calls++
		if calls == 1 {
			return []int32{pid}
		}
		return nil // no longer found, though it ignores SIGTERM
	}, 300*time.Millisecond, nil)
	if n != 1 {
		t.Errorf("Stop signalled %d processes, want 1", n)
	}
	select {
	case <-reaped:
	case <-testdeadline.GiveUp():
		t.Fatal("Stop returned with the process it signalled still running")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Errorf("ended by %v, want SIGKILL", ws)
	}
}

// A Tree reads the processes it keeps through files it opened once: what
// it lists must change as the tree does, as Descendants' fresh reads do. A
// child forked by a thread born after Keep is found, a kept child's own
// child is found through the child's kept files, and a process reaped is
// no longer listed.
func TestTreeKeptFilesFollowTheTree(t *testing.T) {
	t.Parallel()
	self := int32(os.Getpid())
	tree := contain.NewTree()
	defer tree.Close()
	if err := tree.Keep(self); err != nil {
		t.Fatal(err)
	}
	tree.Descendants(context.Background(), self) // read once before the changes
	// A thread of its own: the other goroutines keep theirs, locked.
	release := make(chan struct{})
	defer close(release)
	started := make(chan *exec.Cmd)
	for i := range 4 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if i == 3 {
				cmd := exec.Command("/bin/sh", "-c", "sleep 100 & exec sleep 100")
				if err := cmd.Start(); err != nil {
					t.Error(err)
				}
				started <- cmd
			}
			<-release
		}()
	}
	cmd := <-started
	if cmd.Process == nil {
		return
	}
	pid := int32(cmd.Process.Pid)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := tree.Keep(pid); err != nil {
		t.Fatal(err)
	}
	var found []int32
	if !testdeadline.Until(20*time.Millisecond, func() bool {
		found = tree.Descendants(context.Background(), self)
		// The shell (now sleep) and its background sleep.
		return slices.Contains(found, pid) && len(tree.Descendants(context.Background(), pid)) == 1
	}) {
		t.Fatalf("the kept tree lists %v (below %d: %v), want %d and its child; Descendants lists %v",
			found, pid, tree.Descendants(context.Background(), pid), pid, contain.Descendants(context.Background(), self))
	}
	child := tree.Descendants(context.Background(), pid)[0]
	if fresh := contain.Descendants(context.Background(), pid); !slices.Equal(fresh, []int32{child}) {
		t.Errorf("below %d: the kept tree lists %d, Descendants %v", pid, child, fresh)
	}
	if st, ok := tree.ReadStat(pid); !ok || st.PPID != self || st.State == 'Z' {
		t.Errorf("stat of kept %d: %+v %v, want a live child of %d", pid, st, ok, self)
	}
	syscall.Kill(int(child), syscall.SIGKILL)
	tree.Forget(pid)
	cmd.Process.Kill()
	cmd.Wait()
	if !testdeadline.Until(20*time.Millisecond, func() bool {
		found = tree.Descendants(context.Background(), self)
		return !slices.Contains(found, pid) && !slices.Contains(found, child)
	}) {
		t.Fatalf("after %d was reaped the kept tree still lists %v", pid, found)
	}
}

// Unreaped lists a tree's zombies beside its live processes (their CPU is
// in no live process's yet); Descendants lists the live ones only. The
// script's background child exits and stays a zombie: its parent, then
// sleep, never waits for it.
func TestUnreapedListsZombies(t *testing.T) {
	t.Parallel()
	parent := start(t, "/bin/true & exec sleep 60")
	root := int32(parent.Process.Pid)
	tree := contain.NewTree()
	defer tree.Close()
	var zombie int32
	testdeadline.Wait(t, 10*time.Millisecond, "a zombie under the script", func() bool {
		for _, p := range tree.Unreaped(context.Background(), root) {
			if st, ok := contain.ReadStat(p); ok && st.State == 'Z' {
				zombie = p
			}
		}
		return zombie != 0
	})
	if got := tree.Descendants(context.Background(), root); slices.Contains(got, zombie) {
		t.Errorf("Descendants lists the zombie %d: %v", zombie, got)
	}
	if err := tree.Keep(root); err != nil {
		t.Fatal(err)
	}
	if got := tree.Unreaped(context.Background(), root); !slices.Equal(got, []int32{zombie}) {
		t.Errorf("Unreaped through kept files lists %v, want the zombie %d", got, zombie)
	}
}
