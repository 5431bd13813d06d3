package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A run proof says which run a task runner's supervisor is serving now. A
// runner may serve several tasks one after another (see den/runner), so
// what its environment said at exec is no proof of its current task. The
// supervisor, which runs no plugin code, holds one memfd named
// "den-run:<task id>.<run token>" while it serves a run, and one named
// "den-run:idle" between runs; a node reads the names from
// /proc/PID/fd, which only the supervisor itself (or a process allowed to
// ptrace it, which could do anything to it anyway) can change.

const (
	proofPrefix = "den-run:"
	proofIdle   = "idle"
)

// HoldProof creates the proof of marker (Marker(task, token), or "" for
// "between runs") in the calling process. Keep the file open for as long
// as it holds; close it when the run is over. It is close-on-exec.
func HoldProof(marker string) (*os.File, error) {
	if marker == "" {
		marker = proofIdle
	}
	fd, err := unix.MemfdCreate(proofPrefix+marker, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create the run proof: %w", err)
	}
	return os.NewFile(uintptr(fd), proofPrefix+marker), nil
}

// ProvesRun reports whether process pid proves it serves the run of task
// with token now (proves), and whether it holds a run proof at all (held:
// false for a runner of a den that predates proofs, or no runner). A
// supervisor swaps one proof for the next in microseconds, and a listing
// of its descriptors may miss both, so a process that seems to hold none
// is looked at three times.
func ProvesRun(pid int, taskID, token string) (proves, held bool) {
	for range 3 {
		if marker, held := ProvenRun(pid); held {
			return marker == Marker(taskID, token), true
		}
	}
	return false, false
}

// ProvenRun reads the run proof process pid holds, once: its marker, ""
// when it is between runs (or, for the moment a supervisor swaps one proof
// for the next, holds two: that proves no run either). held is false when
// the process holds no proof at all, or its descriptors cannot be read.
func ProvenRun(pid int) (marker string, held bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	found := 0
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		// "/memfd:den-run:<marker> (deleted)"
		name, ok := strings.CutPrefix(link, "/memfd:"+proofPrefix)
		if !ok {
			continue
		}
		found++
		marker = strings.TrimSuffix(name, " (deleted)")
	}
	if found != 1 || marker == proofIdle {
		return "", found > 0
	}
	return marker, true
}
