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

	"golang.org/x/sys/unix"
)

// A command task's memory and CPU limits hold in cgroups of the task's
// own, made under this process's cgroup in the node's cgroup v1
// hierarchies of the memory and cpu controllers (a hybrid system, as
// root): memory.go and cpu.go. Each is named den-task-<pid of its
// maker>-<random>; where the two controllers share a hierarchy, the task
// has one cgroup for both. The program joins them before it executes (an
// init forks it from a thread that joins them alone), and no process of
// the task can leave them without privileges.
//
// den's cgroup v2 (a delegated subtree) is no place for them: the run's
// cgroup holds den's worker beside the task, and a cgroup v2 with a
// process in it may not enable controllers for its children.

// taskPrefix begins the name of a task's cgroup.
const taskPrefix = "den-task-"

// v1Root is this process's cgroup in one cgroup v1 hierarchy, under
// which tasks' cgroups are made, or why there is none; looked for once
// per process.
type v1Root struct {
	once   sync.Once
	detect func() (string, error)
	dir    string
	err    error
}

func (r *v1Root) get() (string, error) {
	r.once.Do(func() { r.dir, r.err = r.detect() })
	return r.dir, r.err
}

// TaskCgroups are one command task's cgroups: Memory, whose limit holds
// Spec.Memory, and CPU, whose quota holds Spec.CPU, for
// Spec.MemoryCgroup and Spec.CPUCgroup; empty where there is none (the
// limits then hold by RLIMIT_DATA, and the CPU not at all: SCHED_IDLE).
// Where the two controllers share a hierarchy they are the same cgroup.
type TaskCgroups struct {
	Memory, CPU string
}

// NewTaskCgroups makes a task's cgroups for its limits: memory bytes and
// cpu cores (0: none). Where a hierarchy has no cgroup for tasks
// (MemoryCgroups, CPUCgroups), it makes none there, and that is no
// error (the node says at start what holds); the error is of a cgroup
// that could not be made or set where one should have been, and what was
// made is returned with it. Remove removes them once the program and all
// it started are gone.
func NewTaskCgroups(memory int64, cpu float64) (TaskCgroups, error) {
	var c TaskCgroups
	var errs []error
	if memory > 0 {
		if _, err := MemoryCgroups(); err == nil {
			c.Memory, err = NewMemoryCgroup(memory)
			errs = append(errs, err)
		}
	}
	if cpu > 0 {
		if root, err := CPUCgroups(); err == nil {
			if c.Memory != "" && filepath.Dir(c.Memory) == root {
				// One hierarchy for both: the task's one cgroup.
				if err = setCPUQuota(c.Memory, cpu); err == nil {
					c.CPU = c.Memory
				}
			} else {
				c.CPU, err = NewCPUCgroup(cpu)
			}
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// Remove removes a task's cgroups. It fails while a process is still in
// one (one the task left, which den's supervisor stops after the plugin
// returns): the next task's NewTaskCgroups of another process removes it
// once its maker is gone.
func (c TaskCgroups) Remove() error {
	err := removeTaskCgroup(c.Memory)
	if c.CPU != c.Memory {
		err = errors.Join(err, removeTaskCgroup(c.CPU))
	}
	return err
}

// newTaskCgroup makes a task's cgroup under root, named for this
// process, and sets its limit with set; it removes it again if set
// fails. It first removes the empty cgroups of makers that are gone (a
// runner's worker killed before it could remove its own).
func newTaskCgroup(root, what string, set func(dir string) error) (string, error) {
	sweepTaskCgroups(root)
	dir, err := os.MkdirTemp(root, fmt.Sprintf("%s%d-", taskPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("make the task's %s cgroup: %w", what, err)
	}
	if err := set(dir); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// removeTaskCgroup removes one of a task's cgroups; none ("") or one
// that is gone is no error.
func removeTaskCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the task's cgroup: %w", err)
	}
	return nil
}

// sweepTaskCgroups removes the tasks' cgroups under root whose maker no
// longer runs; the kernel refuses to remove one with a process in it.
func sweepTaskCgroups(root string) {
	matches, _ := filepath.Glob(filepath.Join(root, taskPrefix+"*-*"))
	for _, m := range matches {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), taskPrefix), "-", 2)[0])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		os.Remove(m)
	}
}

// joinCgroup moves this process, about to become the program, into the
// cgroup dir; or, with thread, the calling thread alone (an init, which
// forks the program from it).
func joinCgroup(dir string, thread bool) error {
	if thread {
		return moveThread(dir)
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}
