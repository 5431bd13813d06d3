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
)

// TaskTmp is where a program with a private temporary directory (Spec.PrivateTmp)
// finds its temporary directory: Spec.Tmp is mounted there, and on every
// other shared directory in privateDirs.
const TaskTmp = "/tmp"

// privateDirs are the directories every user may write to on a usual
// system, where one task could plant or read another's files, or leave
// files that outlive it (/run/lock: lock files of serial devices and the
// like). In the program's mount namespace each is its own temporary
// directory, mounted noexec, nosuid and nodev. /tmp comes last: once it is
// mounted, the temporary directory's own path (under the node's /tmp) is
// gone.
var privateDirs = []string{"/var/tmp", "/dev/shm", "/run/lock", TaskTmp}

// tmpPrefix begins the name of every task's temporary directory, which
// goes on with the pid of the process that made it: den-task-<pid>-<random>.
const tmpPrefix = "den-task-"

// NewTmp makes a task's temporary directory: fresh, under the node's
// temporary directory (os.TempDir), mode 0700, owned by user (nil: this
// process's user). RemoveTmp removes it. A process killed before it could
// (a runner's worker killed with SIGKILL) leaves it: NewTmp first removes
// those whose maker is gone.
//
// The directory is locked (flock) until RemoveTmp: a pid says nothing
// across PID namespaces (a node in a container of its own, with the host's
// /tmp), so another process's sweep removes only a directory it can lock.
func NewTmp(user *Credential) (string, error) {
	sweepTmp()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tmpPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("make the task's temporary directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("lock the task's temporary directory: %w", err)
	}
	if user != nil {
		if err := os.Chown(dir, int(user.Uid), int(user.Gid)); err != nil {
			lock.Close()
			os.Remove(dir)
			return "", fmt.Errorf("give the task's temporary directory to uid %d: %w", user.Uid, err)
		}
	}
	tmpLocks.Lock()
	tmpLocks.held[dir] = lock
	tmpLocks.Unlock()
	return dir, nil
}

// tmpLocks are the locks this process holds on the temporary directories
// it made, by directory.
var tmpLocks = struct {
	sync.Mutex
	held map[string]*os.File
}{held: map[string]*os.File{}}

// lockDir takes an exclusive flock on directory dir, without waiting and
// without following a symbolic link; closing the file releases it.
func lockDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// RemoveTmp removes a task's temporary directory made by NewTmp, and all
// the task left in it. What the task's user made there, den's user may not
// be allowed to remove unless it is root (a directory of mode 0 owned by
// the task's user), so for a task user and a node that is not root the
// removal runs as the task's user, through this binary (Main), as the
// program did.
func RemoveTmp(dir string, user *Credential) error {
	tmpLocks.Lock()
	lock := tmpLocks.held[dir]
	delete(tmpLocks.held, dir)
	tmpLocks.Unlock()
	if lock != nil {
		defer lock.Close() // once removed
	}
	if user == nil || os.Geteuid() == 0 {
		return removeTree(dir)
	}
	return removeTmpAs(dir, user)
}

// removeTmpAs removes dir as user, in a process of this binary.
func removeTmpAs(dir string, user *Credential) error {
	cmd, err := Command(Spec{Remove: dir, User: user}, nil)
	if err != nil {
		return err
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("remove the task's temporary directory %s as uid %d: %w: %s", dir, user.Uid, err, out)
	}
	return nil
}

// removeTree removes dir and what it holds. A user other than root first
// gives itself the right to list and change every directory below it (a
// program may have left one of mode 0); root needs no such right, and
// changes no mode, since a process the task left running could swap a
// directory for a symbolic link to a file of anyone's in between.
// os.RemoveAll follows no symbolic link.
func removeTree(dir string) error {
	if os.Geteuid() != 0 {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				os.Chmod(path, 0o700)
			}
			return nil
		})
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the task's temporary directory: %w", err)
	}
	return nil
}

// mountPrivate mounts tmp on each of privateDirs that exists, noexec,
// nosuid and nodev, in this process's own mount namespace (Command made
// it, with the host's mounts made private to it). Where the task's
// temporary directory is a tmpfs (mountTmpfs), tmp is that file system's
// mount on /tmp.
//
// tmp is opened without following a symbolic link, and mounted through
// that descriptor: the directory is its user's, in a directory others may
// write to, and another process of that user could have put a link to
// elsewhere in its place.
func mountPrivate(tmp string) error {
	fd, err := unix.Open(tmp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the task's temporary directory: %w", err)
	}
	defer unix.Close(fd)
	src := fmt.Sprintf("/proc/self/fd/%d", fd)
	for _, target := range privateDirs {
		if target == tmp {
			continue // the tmpfs on /tmp itself
		}
		if st, err := os.Stat(target); err != nil || !st.IsDir() {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("mount the task's temporary directory on %s: %w", target, err)
			}
			continue
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount the task's temporary directory on %s: %w", target, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV)
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("make %s noexec, nosuid, nodev: %w", target, err)
		}
	}
	return nil
}

// sweepTmp removes the tasks' temporary directories whose maker, named by
// the pid in their name, no longer runs, and that no process holds locked
// (its maker, in another PID namespace, where the pid is another's). A
// directory whose pid runs (its task's, or a process that took the pid
// since) is left for a later sweep; one that is not a directory (a
// symbolic link) is never touched.
// A directory of another user than this process's is removed as that
// user (RemoveTmp).
func sweepTmp() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*-*"))
	for _, m := range matches {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), tmpPrefix), "-", 2)[0])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		fi, err := os.Lstat(m)
		if err != nil || !fi.IsDir() {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		lock, err := lockDir(m)
		if err != nil {
			continue // its maker holds it, or it is gone
		}
		var owner *Credential
		if int(st.Uid) != os.Geteuid() {
			owner = &Credential{Uid: st.Uid, Gid: st.Gid}
		}
		if user := owner; user == nil || os.Geteuid() == 0 {
			removeTree(m)
		} else {
			removeTmpAs(m, user)
		}
		lock.Close()
	}
}

// mountTmpfs makes the task's temporary directory a tmpfs of size bytes,
// owned by owner, mode 0700, noexec, nosuid and nodev, so that what a task
// writes there is bounded and gone with its mount namespace: on /tmp,
// which mountPrivate then mounts on the other privateDirs (private), or
// else on the directory tmp itself (the task's TMPDIR), opened without
// following a symbolic link. Its pages are memory, charged to the task's
// memory cgroup where it has one; its inodes are bounded too, one per 4
// KiB of size (a tmpfs's default is half the machine's pages, whatever
// its size).
func mountTmpfs(tmp string, size int64, owner Credential, private bool) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", size, max(size/4096, 1024), owner.Uid, owner.Gid)
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	target := TaskTmp
	if !private {
		fd, err := unix.Open(tmp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the task's temporary directory: %w", err)
		}
		defer unix.Close(fd)
		target = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount the task's temporary directory (a tmpfs of %d bytes): %w", size, err)
	}
	return nil
}
