package devdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in the data directory that a running server holds
// an exclusive lock on (flock); it contains the server's pid.
const LockFile = "den.lock"

// LockedError is returned by Start when another process serves the data
// directory: two servers in front of the same SQLite files would each
// serialize only their own clients' commands, so neither would be atomic.
type LockedError struct {
	// Dir is the data directory.
	Dir string
	// PID is the process holding the lock, as its lock file says; 0 if
	// the file could not be read.
	PID int
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("devdb: data directory %s is in use by %s (a running den dev or den devdb); stop it, or use another --data directory",
		e.Dir, holder)
}

// lockDir takes the exclusive lock on dir's lock file and writes this
// process's pid into it. The lock is the kernel's: it is released when the
// returned function closes the file, and also when the process dies in any
// way, so a crashed server never leaves a stale lock. The file is opened
// close-on-exec, so processes started by a node (task runners) do not hold
// it after den has exited.
func lockDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devdb: open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, PID: holder(path)}
		}
		return nil, fmt.Errorf("devdb: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("devdb: write lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("devdb: write lock file: %w", err)
	}
	return func() { f.Close() }, nil
}

// flock takes an exclusive lock on f without waiting.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// holder reads the pid in a locked lock file. The holder writes it just
// after taking the lock, so an empty file is read again for a moment.
func holder(path string) int {
	for range 20 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0
}
