package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/contain"
)

// A task's memory limit (Spec.Memory) holds by one of two mechanisms:
//
//   - a cgroup of its own in the node's cgroup v1 memory hierarchy, where
//     den may create one there (a hybrid system, as root; DetectMemoryV1):
//     NewMemoryCgroup makes it with memory.limit_in_bytes (and
//     memory.memsw.limit_in_bytes, where swap is accounted) set, the
//     program starts inside it, and the kernel counts everything the task
//     holds there, its processes, their page cache and its tmpfs, and
//     kills a process of the task (the OOM killer, inside the cgroup) when
//     they pass the limit. No process of the task can leave it without
//     privileges;
//   - else RLIMIT_DATA of the program, which every process it starts
//     inherits: each process's data (heap, anonymous mappings) is bounded,
//     not their sum, and the tmpfs not at all; an allocation past it fails
//     (ENOMEM).
//
// den's cgroup v2 (a delegated subtree) is no place for it: the run's
// cgroup holds den's worker beside the task, and a cgroup v2 with a
// process in it may not enable controllers for its children.

// memoryPrefix begins the name of a task's memory cgroup:
// den-task-<pid of its maker>-<random>.
const memoryPrefix = "den-task-"

var memoryRoot struct {
	once sync.Once
	dir  string
	err  error
}

// MemoryCgroups returns the directory of this process's cgroup v1 memory
// cgroup, under which NewMemoryCgroup makes tasks' cgroups, or why there
// is none. It looks once per process.
func MemoryCgroups() (string, error) {
	memoryRoot.once.Do(func() { memoryRoot.dir, memoryRoot.err = contain.DetectMemoryV1() })
	return memoryRoot.dir, memoryRoot.err
}

// NewMemoryCgroup makes a cgroup for one program, limited to limit bytes,
// for Spec.MemoryCgroup; RemoveMemoryCgroup removes it once the program
// and all it started are gone. It fails where there is no memory cgroup
// for tasks (MemoryCgroups): Spec.Memory alone then sets RLIMIT_DATA. It
// first removes the empty cgroups of makers that are gone (a runner's
// worker killed before it could remove its own).
func NewMemoryCgroup(limit int64) (string, error) {
	root, err := MemoryCgroups()
	if err != nil {
		return "", err
	}
	sweepMemoryCgroups(root)
	dir, err := os.MkdirTemp(root, fmt.Sprintf("%s%d-", memoryPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("make the task's memory cgroup: %w", err)
	}
	set := func(file string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0)
	}
	if err := set("memory.limit_in_bytes"); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("set the task's memory limit: %w", err)
	}
	// Where swap is accounted, memory and swap together: else a task
	// could swap out what passes the limit.
	if err := set("memory.memsw.limit_in_bytes"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.Remove(dir)
		return "", fmt.Errorf("set the task's memory and swap limit: %w", err)
	}
	return dir, nil
}

// RemoveMemoryCgroup removes a task's memory cgroup. It fails while a
// process is still in it (one the task left, which den's supervisor stops
// after the plugin returns): the next NewMemoryCgroup of another process
// removes it once its maker is gone.
func RemoveMemoryCgroup(dir string) error {
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the task's memory cgroup: %w", err)
	}
	return nil
}

// OOMKills returns how many processes the kernel's OOM killer killed in a
// task's memory cgroup (memory.oom_control's oom_kill, Linux 4.13).
func OOMKills(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// sweepMemoryCgroups removes the tasks' memory cgroups under root whose
// maker no longer runs; the kernel refuses to remove one with a process
// in it.
func sweepMemoryCgroups(root string) {
	matches, _ := filepath.Glob(filepath.Join(root, memoryPrefix+"*-*"))
	for _, m := range matches {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), memoryPrefix), "-", 2)[0])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		os.Remove(m)
	}
}

// limitMemory puts this process, about to become the program or start it,
// under the task's memory limit: into the cgroup Spec.MemoryCgroup (the
// calling thread alone, for an init), else under RLIMIT_DATA.
func limitMemory(spec Spec, thread bool) error {
	if spec.MemoryCgroup != "" {
		var err error
		if thread {
			err = moveThread(spec.MemoryCgroup)
		} else {
			err = os.WriteFile(filepath.Join(spec.MemoryCgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		}
		if err != nil {
			return fmt.Errorf("join the task's memory cgroup %s: %w", spec.MemoryCgroup, err)
		}
		return nil
	}
	if spec.Memory <= 0 {
		return nil
	}
	rl := syscall.Rlimit{Cur: uint64(spec.Memory), Max: uint64(spec.Memory)}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_DATA, &old); err == nil && old.Max < rl.Max {
		rl.Cur, rl.Max = old.Max, old.Max // never raise a lower hard limit
	}
	if err := syscall.Setrlimit(unix.RLIMIT_DATA, &rl); err != nil {
		return fmt.Errorf("set RLIMIT_DATA to %d: %w", spec.Memory, err)
	}
	return nil
}
