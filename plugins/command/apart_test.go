package command_test

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/sys/unix"
)

// ipcKey returns a random positive SysV IPC key.
func ipcKey() int {
	var b [4]byte
	rand.Read(b[:])
	return int(binary.BigEndian.Uint32(b[:])&0x3fffffff) + 1
}

// schedState is what another process could change of a process: its CPU
// time limit, nice value, scheduling policy, CPUs and I/O priority.
type schedState struct {
	cpuLimit     string
	prio, policy int
	cpus         unix.CPUSet
	ioprio       uintptr
	errs         []string
}

// observe reads pid's schedState from the node.
func observe(pid int) schedState {
	var s schedState
	note := func(what string, err error) {
		if err != nil {
			s.errs = append(s.errs, what+": "+err.Error())
		}
	}
	// /proc/PID/limits: prlimit(2) of another user's process needs
	// CAP_SYS_RESOURCE, which a test's root may lack.
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	note("limits", err)
	for _, l := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(l, "Max cpu time") {
			s.cpuLimit = strings.Join(strings.Fields(l), " ")
		}
	}
	var prio int
	prio, err = unix.Getpriority(unix.PRIO_PROCESS, pid)
	s.prio = prio
	note("getpriority", err)
	policy, _, errno := syscall.Syscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(pid), 0, 0)
	s.policy = int(policy)
	if errno != 0 {
		note("sched_getscheduler", errno)
	}
	note("sched_getaffinity", unix.SchedGetaffinity(pid, &s.cpus))
	s.ioprio, _, errno = syscall.Syscall(unix.SYS_IOPRIO_GET, 1 /* IOPRIO_WHO_PROCESS */, uintptr(pid), 0)
	if errno != 0 {
		note("ioprio_get", errno)
	}
	return s
}

// Two tasks of different queues, both running as command.user, as the
// issue's attacker had them: the victim holds a SysV shared memory segment
// of mode 0600 with a secret and waits; the attacker, told the victim's
// pid on the node and the segment's key (a guess away: pids and keys are
// few), tries prlimit(RLIMIT_CPU) (which killed the victim), setpriority
// of the process and of the whole user, sched_setaffinity,
// sched_setscheduler(SCHED_IDLE) and ioprio_set(idle) (which starved it),
// listing /proc/PID/fd, and shmat of the segment (which read it). The
// kernel checks none of these against Landlock, only the user, which is
// the same; each task has a PID namespace and an IPC namespace of its own,
// where the other's processes and objects do not exist: every attempt
// fails (ESRCH, ENOENT), setpriority of the user changes only the
// attacker's own processes, and the victim, looked at from the node, is as
// it was, and runs to its end.
func TestTasksOfOneUserKeptApart(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	policy, helper := reachPolicy(t)
	gate := hostDir(t)
	if err := os.Chmod(gate, 0o777); err != nil {
		t.Fatal(err)
	}
	goOn := filepath.Join(gate, "go")
	key := ipcKey()
	hold := fmt.Sprintf("shm-hold:%d:%s:%s", key, token("secret-"), goOn)
	done := make(chan bson.Raw, 1)
	go func() { done <- runTask(t, asTaskUser(policy), bson.D{{Key: "command", Value: bson.A{helper, hold}}}) }()
	victim := awaitHostPids(t, hold, done)[0]
	before := observe(victim)
	if len(before.errs) > 0 {
		t.Fatalf("the node cannot read the victim's state: %v", before.errs)
	}
	pid := strconv.Itoa(victim)
	attempts := []string{"prlimit:" + pid, "nice:" + pid, "niceuser:65534", "affinity:" + pid, "idle:" + pid, "ioprio:" + pid, "fds:" + pid, "shm:" + strconv.Itoa(key)}
	raw := runTask(t, asTaskUser(policy), bson.D{{Key: "command", Value: append(bson.A{helper}, toA(attempts)...)}})
	stdout := text(t, raw, "stdout")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(attempts) {
		t.Fatalf("the attacker: stdout %q, stderr %q", stdout, text(t, raw, "stderr"))
	}
	for i, l := range lines {
		// setpriority of a whole user changes the processes of that user
		// the caller can see: its own.
		if strings.HasSuffix(l, ": ok") && !strings.HasPrefix(attempts[i], "niceuser:") {
			t.Errorf("the attacker got through: %s", l)
		}
	}
	t.Logf("the attacker: %q", stdout)
	if after := observe(victim); !equalState(before, after) {
		t.Errorf("the victim was changed: before %+v, after %+v", before, after)
	}
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if raw := <-done; raw.Lookup("status").AsInt64() != 1 || text(t, raw, "stdout") != hold+": ok\n" {
		t.Fatalf("the victim did not run to its end: status %v, stdout %q, stderr %q", raw.Lookup("status"), text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
}

func equalState(a, b schedState) bool {
	return a.cpuLimit == b.cpuLimit && a.prio == b.prio && a.policy == b.policy && a.cpus == b.cpus && a.ioprio == b.ioprio && slices.Equal(a.errs, b.errs)
}

func toA(ss []string) bson.A {
	out := make(bson.A, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
