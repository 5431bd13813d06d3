package devdb_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/den-project/den/den/internal/testdeadline"

	"github.com/den-project/den/den/devdb"
)

// One server at a time serves a data directory: a second Start on it
// fails with a *LockedError naming the holder's pid, and succeeds once
// the first has stopped.
func TestDataDirectoryIsLocked(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	first, err := devdb.Start(firstCtx, devdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, devdb.LockFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q (%v), want this process's pid %d", b, err, os.Getpid())
	}

	_, err = devdb.Start(ctx, devdb.Config{Dir: dir})
	var locked *devdb.LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("second Start on the same directory: %v, want a *LockedError", err)
	}
	pid := strconv.Itoa(os.Getpid())
	if locked.PID != os.Getpid() || !strings.Contains(err.Error(), "process "+pid) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q (pid %d) does not name the holder %s and the directory", err, locked.PID, pid)
	}
	// Another directory is not affected.
	other, err := devdb.Start(ctx, devdb.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start on another directory: %v", err)
	}

	stopFirst()
	<-first.Done()
	again, err := devdb.Start(ctx, devdb.Config{Dir: dir})
	if err != nil {
		t.Fatalf("Start after the first server stopped: %v", err)
	}
	cancel()
	<-other.Done()
	<-again.Done()
}
