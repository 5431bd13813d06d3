package sandbox

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInherited marks every file descriptor of this process from 3 up
// close-on-exec, so that no program it executes gets one: a descriptor
// whoever started the node left open without FD_CLOEXEC (a shell's
// redirection, a supervisor's socket, a test's ExtraFiles) would otherwise
// reach every task's program through the node, the runner and the sandbox,
// since Go's exec dups the descriptors it is given and closes none other.
// Descriptors this process uses itself stay open until it executes.
//
// It uses close_range(2) with CLOSE_RANGE_CLOEXEC (Linux 5.11), else sets
// FD_CLOEXEC on each descriptor /proc/self/fd lists.
func CloseInherited() error {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The descriptor ReadDir used is closed by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}
