package contain

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runPrefix starts the name of every run's cgroup.
const runPrefix = "den-run-"

// DetectCgroup returns the directory of this process's cgroup v2 when the
// process may create cgroups in it (the node's delegated subtree, as
// systemd's Delegate=yes gives a service), or an error saying why not. On a
// hybrid system the v2 hierarchy mounted beside the v1 controllers counts.
func DetectCgroup() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	rel, err := ownCgroup2()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(mount, rel)
	probe, err := os.MkdirTemp(dir, fmt.Sprintf("den-probe-%d-", os.Getpid())) // unique: callers may probe at once
	if err != nil {
		return "", fmt.Errorf("cgroup %s is not delegated to this process: %w", dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return "", fmt.Errorf("remove probe cgroup %s: %w", probe, err)
	}
	return dir, nil
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

func ownCgroup2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return rel, nil
		}
	}
	return "", errors.New("this process has no cgroup v2 membership")
}

// RunCgroup is the directory of one run's cgroup under parent. It is made
// from the task id and run token alone, so that a runner field written by
// hand can never name another cgroup.
func RunCgroup(parent, taskID, token string) string {
	return filepath.Join(parent, runPrefix+taskID+"-"+token)
}

// HoldingCgroup is the directory of the cgroup under parent where a task
// runner (id: its own random id) waits between runs. Its name never
// matches a run's, so stopping what a run left never touches it.
func HoldingCgroup(parent, id string) string {
	return filepath.Join(parent, "den-runner-"+id)
}

// CreateCgroup creates a run's cgroup and returns it opened, for
// SysProcAttr.CgroupFD (the child starts inside it).
func CreateCgroup(dir string) (*os.File, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return f, nil
}

// MoveToCgroup creates a run's cgroup, if need be, and moves process pid
// into it.
func MoveToCgroup(dir string, pid int) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return MoveInto(dir, pid)
}

// MoveInto moves process pid into the cgroup dir, which exists.
func MoveInto(dir string, pid int) error {
	if err := writeProc(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move process %d into cgroup %s: %w", pid, dir, err)
	}
	return nil
}

// writeProc writes a short value to a cgroup (or /proc) file with open,
// write and close only (os.WriteFile also asks the file's type).
func writeProc(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// CgroupProcs lists the processes in a cgroup; none when it does not exist.
func CgroupProcs(dir string) []int32 {
	var buf []byte
	b, err := readProc(filepath.Join(dir, "cgroup.procs"), &buf)
	if err != nil {
		return nil
	}
	return appendPids(nil, b)
}

// KillCgroup kills every process in a cgroup at once (cgroup.kill, Linux
// 5.14), or one by one where the kernel lacks it.
func KillCgroup(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	for _, pid := range CgroupProcs(dir) {
		syscall.Kill(int(pid), syscall.SIGKILL)
	}
}

// RemoveCgroup removes a run's cgroup once it is empty, waiting up to
// within for its last processes to be reaped. A cgroup that does not
// exist is no error.
func RemoveCgroup(dir string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		// rmdir itself: os.Remove tries unlink first.
		var err error
		if e := unix.Rmdir(dir); e != nil {
			err = &os.PathError{Op: "rmdir", Path: dir, Err: e}
		}
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(poll)
	}
}
