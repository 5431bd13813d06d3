package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
)

// Memory enforcement (see queue/resourceretry.go). When
// a task requests memory (requested_resources.memory_mb), the worker tells
// the supervisor ("memory <bytes>"), which from then on samples the run's
// processes every memoryEvery and, once the resident memory of the
// processes the task started (every process of the run but the worker,
// whose own memory is den's, not the task's) passes the request, kills
// them all with SIGKILL, as the kernel's OOM killer would, and keeps what
// it saw. The plugin sees its program killed; the worker, asking for the
// run's usage at its end, learns why, records outcome resource_killed, and
// retries the task with more memory when it has retries left.
//
// This is a sampled limit: a program that grows past its request and
// back within memoryEvery is not seen. Where the run has a cgroup with the
// memory controller, the kernel's OOM kills inside it (memory.events
// oom_kill) count the same way.

// memoryEvery is how often the supervisor looks at a run's memory when
// its task requested some.
const memoryEvery = 250 * time.Millisecond

// enforceMemory samples the run and, if the task's processes hold more
// than the limit, kills them all. It returns how many it killed.
//
// The sample sums RSS, which counts a page shared by several processes
// (after fork, copy-on-write) once per process. So before killing, the
// task's processes are measured again by their proportional share (Pss,
// /proc/PID/smaps_rollup: a shared page counts once in all), without den's
// sandbox trampoline; only if that too passes the request are they killed,
// trampolines included (they are the task's programs about to start).
func (s *supervisor) enforceMemory(ctx context.Context) int {
	if s.usage.limit <= 0 {
		return 0
	}
	s.usage.sample(ctx)
	if s.usage.taskRSS <= s.usage.limit {
		return 0
	}
	me, worker := int32(os.Getpid()), int32(s.worker)
	var task []int32
	seen := map[int32]bool{}
	held := int64(0)
	for _, pid := range s.tree.Descendants(ctx, me) {
		if pid == worker || seen[pid] {
			continue
		}
		seen[pid] = true
		task = append(task, pid)
		if !trampoline(pid, worker) {
			held += proportional(pid)
		}
	}
	if s.run.cgroup != "" {
		for _, pid := range contain.CgroupProcs(s.run.cgroup) {
			if pid != worker && pid != me && !seen[pid] {
				seen[pid] = true
				task = append(task, pid)
				held += proportional(pid)
			}
		}
	}
	if held <= s.usage.limit {
		return 0 // shared pages, or den's own trampoline, made the difference
	}
	n := 0
	for _, pid := range task {
		if syscall.Kill(int(pid), syscall.SIGKILL) == nil {
			n++
		}
	}
	if s.usage.killed == nil {
		s.usage.killed = &runner.MemoryKill{RSS: held, Limit: s.usage.limit, Procs: n}
		s.log.Warn("the task's processes passed its memory request; killed them",
			zap.Int64("held_mb", held>>20), zap.Int64("requested_mb", s.usage.limit>>20), zap.Int("processes", n))
	}
	return n
}

// proportional is a process's proportional set size in bytes (Pss in
// /proc/PID/smaps_rollup), or its RSS where the kernel has no
// smaps_rollup (before 4.14); 0 when it is gone.
func proportional(pid int32) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/smaps_rollup")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return kb << 10
			}
		}
	}
	if st, ok := contain.ReadStat(pid); ok {
		return st.RSSPages * int64(os.Getpagesize())
	}
	return 0
}

// trampoline reports whether pid is den's own, not the task's: a child of
// the worker that is still this very binary. That is den's sandbox
// trampoline (package den/sandbox: re-executed to restrict itself before
// it execs the task's program), or any child of the worker between fork
// and exec: Go starts programs with clone(CLONE_VM|CLONE_VFORK), so until
// its exec the child shares the worker's memory, and /proc shows the
// worker's whole RSS and Pss for it (a task requesting less than the
// worker holds was killed in that window on a loaded machine). Its memory
// is den's for the moment it lives.
func trampoline(pid, worker int32) bool {
	st, ok := contain.ReadStat(pid)
	return ok && st.PPID == worker && ownBinary(pid)
}

// ownBinary reports whether the process pid executes this very binary.
func ownBinary(pid int32) bool {
	self, err1 := os.Stat("/proc/self/exe")
	exe, err2 := os.Stat("/proc/" + strconv.Itoa(int(pid)) + "/exe")
	return err1 == nil && err2 == nil && os.SameFile(self, exe)
}

// oomKills reads the oom_kill count of a cgroup's memory.events: the
// processes of the run the kernel's OOM killer killed. 0 without the
// memory controller.
func oomKills(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
