package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/contain"
)

// A task's memory limit (Spec.Memory) holds by one of two mechanisms:
//
//   - a cgroup of its own in the node's cgroup v1 memory hierarchy, where
//     den may create one there (taskcgroup.go): NewMemoryCgroup makes it
//     with memory.limit_in_bytes (and memory.memsw.limit_in_bytes, where
//     swap is accounted) set, the program starts inside it, and the
//     kernel counts everything the task holds there, its processes, their
//     page cache and its tmpfs, and kills a process of the task (the OOM
//     killer, inside the cgroup) when they pass the limit;
//   - else RLIMIT_DATA of the program, which every process it starts
//     inherits: each process's data (heap, anonymous mappings) is bounded,
//     not their sum, and the tmpfs not at all; an allocation past it fails
//     (ENOMEM).

var memoryRoot = v1Root{detect: contain.DetectMemoryV1}

// MemoryCgroups returns the directory of this process's cgroup v1 memory
// cgroup, under which NewMemoryCgroup makes tasks' cgroups, or why there
// is none. It looks once per process.
func MemoryCgroups() (string, error) { return memoryRoot.get() }

// NewMemoryCgroup makes a cgroup for one program, limited to limit bytes,
// for Spec.MemoryCgroup; RemoveMemoryCgroup removes it once the program
// and all it started are gone. It fails where there is no memory cgroup
// for tasks (MemoryCgroups): Spec.Memory alone then sets RLIMIT_DATA.
func NewMemoryCgroup(limit int64) (string, error) {
	root, err := MemoryCgroups()
	if err != nil {
		return "", err
	}
	return newTaskCgroup(root, "memory", func(dir string) error {
		set := func(file string) error {
			return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0)
		}
		if err := set("memory.limit_in_bytes"); err != nil {
			return fmt.Errorf("set the task's memory limit: %w", err)
		}
		// Where swap is accounted, memory and swap together: else a task
		// could swap out what passes the limit.
		if err := set("memory.memsw.limit_in_bytes"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set the task's memory and swap limit: %w", err)
		}
		return nil
	})
}

// RemoveMemoryCgroup removes a task's memory cgroup (TaskCgroups.Remove).
func RemoveMemoryCgroup(dir string) error { return removeTaskCgroup(dir) }

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

// limitMemory puts this process, about to become the program or start it,
// under the task's memory limit: into the cgroup Spec.MemoryCgroup (the
// calling thread alone, for an init), else under RLIMIT_DATA.
func limitMemory(spec Spec, thread bool) error {
	if spec.MemoryCgroup != "" {
		if err := joinCgroup(spec.MemoryCgroup, thread); err != nil {
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
