package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// limitProcesses puts this process, about to become the program, under
// its process limit: into the pids cgroup given (whose pids.max the
// task runner's supervisor set), or else under RLIMIT_NPROC
// (limitUserProcesses) for its own user, which it is by then.
func limitProcesses(max int, pidsCgroup string) error {
	if pidsCgroup != "" {
		procs := filepath.Join(pidsCgroup, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("join the run's pids cgroup %s: %w", pidsCgroup, err)
		}
		return nil
	}
	return limitUserProcesses(max, uint32(os.Getuid()), false)
}

// moveThread moves the calling thread alone (cgroup v1's tasks file)
// into the cgroup dir: a task's init, whose other threads must not count
// against the task's limit, forks the program from this thread, which the
// program's process then starts in. The thread must be locked to its
// goroutine (runtime.LockOSThread).
func moveThread(dir string) error {
	return os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(unix.Gettid())), 0)
}

// limitUserProcesses sets RLIMIT_NPROC, which the programs this process
// starts as user uid inherit; stays says this process stays beside them
// (an init) rather than becoming the program.
//
// RLIMIT_NPROC is no per-task limit: the kernel compares it with the
// number of processes and threads of the caller's real user (in its user
// namespace), whoever started them. So it is set to max plus what that
// user runs already (other tasks, den itself when tasks run as den's
// user), counted from /proc: the task may add max processes to those.
// The kernel ignores it for root (so it is not set for root, sparing the
// count) and for holders of CAP_SYS_RESOURCE or CAP_SYS_ADMIN. It never
// raises a lower hard limit already set.
func limitUserProcesses(max int, uid uint32, stays bool) error {
	if uid == 0 {
		return nil
	}
	limit := uint64(max) + userTasks(int(uid))
	if stays && uint32(os.Getuid()) == uid {
		limit++ // this process, which userTasks leaves out, counts too
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &rl); err != nil {
		return fmt.Errorf("read RLIMIT_NPROC: %w", err)
	}
	limit = min(limit, rl.Max)
	rl.Cur, rl.Max = limit, limit
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &rl); err != nil {
		return fmt.Errorf("set RLIMIT_NPROC to %d: %w", limit, err)
	}
	return nil
}

// userTasks counts the threads of every process but this one whose real
// user is uid, as far as /proc shows them.
func userTasks(uid int) uint64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	// This process as /proc names it: in a PID namespace of its own whose
	// /proc is not mounted yet (an init), its pid there is not getpid's.
	self := os.Getpid()
	if link, err := os.Readlink("/proc/self"); err == nil {
		if pid, err := strconv.Atoi(link); err == nil {
			self = pid
		}
	}
	want := strconv.Itoa(uid)
	var n uint64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if threads, ok := threadsOf(pid, want); ok {
			n += threads
		}
	}
	return n
}

// threadsOf returns the number of threads of process pid when its real
// user is uid.
func threadsOf(pid int, uid string) (uint64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			// real, effective, saved, filesystem
			f := strings.Fields(rest)
			if len(f) == 0 || f[0] != uid {
				return 0, false
			}
			mine = true
		} else if rest, ok := strings.CutPrefix(line, "Threads:"); ok && mine {
			n, err := strconv.ParseUint(strings.TrimSpace(rest), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
