package sandbox

import (
	"bufio"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// initSpec is a program run by sh -c script in PID, IPC and mount
// namespaces of its own, as the command plugin runs tasks by default.
func initSpec(script string) Spec {
	return Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, MountNS: true, PIDNS: true, IPCNS: true, GraceMS: 200}
}

func needNamespaces(t *testing.T) {
	t.Helper()
	if !HasCaps(CapsNamespaces) {
		t.Skipf("this test process lacks %s, so it cannot make namespaces", CapsNamespaces)
	}
}

// The sandbox, init of the program's PID namespace, reports how the
// program ended: its exit code, the signal that killed it, and how many
// processes it left running (which the init then stopped). The program
// sees only its own processes and its init: sh, sleep and the init are
// three.
func TestInitReportsTheProgramsEnd(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	for _, tc := range []struct {
		name, script, out string
		code              int
		signal            syscall.Signal
		left              int
	}{
		{name: "exit code", script: "exit 3", code: 3},
		{name: "killed by a signal", script: "kill -TERM $$", signal: syscall.SIGTERM},
		{name: "killed by SIGKILL", script: "kill -KILL $$", signal: syscall.SIGKILL},
		{name: "its own processes only", script: `sleep 60 & set -- /proc/[0-9]*; echo $#`, out: "3\n", left: 1},
		{name: "leftovers that ignore SIGTERM", script: `sh -c 'trap "" TERM; sleep 60' & setsid sh -c 'trap "" TERM; sleep 60' & sleep 0.2`, left: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd, err := Command(initSpec(tc.script), []string{"PATH=/usr/bin:/bin"})
			if err != nil {
				t.Fatal(err)
			}
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the init: %v: %s", err, out)
			}
			end, ok := cmd.Exit()
			if !ok {
				t.Fatal("no exit")
			}
			ws := end.Status
			exited := !ws.Signaled() && ws.ExitStatus() == tc.code
			killed := ws.Signaled() && ws.Signal() == tc.signal
			if (tc.signal == 0 && !exited) || (tc.signal != 0 && !killed) || end.Left != tc.left {
				t.Errorf("program ended %#x (exit %d, signal %v), left %d; want exit %d, signal %v, left %d", uint32(ws), ws.ExitStatus(), ws.Signal(), end.Left, tc.code, tc.signal, tc.left)
			}
			if tc.out != "" && string(out) != tc.out {
				t.Errorf("output %q, want %q", out, tc.out)
			}
		})
	}
}

// A signal den sends the init (SIGTERM, stopping a task) reaches every
// process of the task, the program and what escaped its process group.
func TestInitPassesSignalsOn(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	script := `setsid sh -c 'trap "echo escaped got TERM; exit" TERM; echo escaped ready; while :; do sleep 0.05; done' & ` +
		`trap 'wait; echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`
	cmd, err := Command(initSpec(script), []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = "/"
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Both shells have set their traps once each has said so, in either
	// order.
	lines := bufio.NewScanner(stdout)
	var ready []string
	for len(ready) < 2 && lines.Scan() {
		ready = append(ready, lines.Text())
	}
	if slices.Sort(ready); !slices.Equal(ready, []string{"escaped ready", "ready"}) {
		t.Fatalf("the program said %q", ready)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	var said []string
	for lines.Scan() {
		said = append(said, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	end, _ := cmd.Exit()
	if end.Status.ExitStatus() != 7 || strings.Join(said, "\n") != "escaped got TERM\ngot TERM" {
		t.Fatalf("the program ended %#x and said %q", uint32(end.Status), said)
	}
}
