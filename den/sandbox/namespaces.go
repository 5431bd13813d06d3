package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// A task's namespaces. Command has the sandbox start in a mount namespace
// of its own (Spec.MountNS), an IPC namespace (Spec.IPCNS: SysV shared
// memory, message queues and semaphores, and POSIX message queues, which
// no other task sees and which the kernel frees with the namespace when
// the task's last process ends), a network namespace (Spec.NoNetwork),
// and a PID namespace whose init it is (Spec.PIDNS: the task sees, and
// can name, only its own processes, so prlimit, setpriority,
// sched_setaffinity, sched_setscheduler, ioprio_set, kill and
// /proc/PID/... reach no other task's, nor den's). In the mount namespace
// the sandbox mounts, before anything else: the task's temporary
// directory (tmp.go), noexec everywhere but what the task may execute
// (mounts.go), a /proc of the PID namespace and a /dev/mqueue of the IPC
// namespace.

// namespaceFlags are the namespaces Command has the sandbox unshare as it
// starts (the PID namespace is made at clone instead).
func namespaceFlags(spec Spec) uintptr {
	var flags uintptr
	if spec.MountNS || spec.PIDNS {
		flags |= syscall.CLONE_NEWNS
	}
	if spec.IPCNS {
		flags |= syscall.CLONE_NEWIPC
	}
	if spec.NoNetwork {
		flags |= syscall.CLONE_NEWNET
	}
	return flags
}

// mountTask makes the task's mounts in this process's own mount
// namespace.
func mountTask(spec Spec) error {
	if spec.Tmp != "" && spec.TmpSize > 0 {
		owner := Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
		if spec.User != nil {
			owner = *spec.User
		}
		if err := mountTmpfs(spec.Tmp, spec.TmpSize, owner, spec.PrivateTmp); err != nil {
			return err
		}
		if spec.PrivateTmp {
			if err := mountPrivate(TaskTmp); err != nil {
				return err
			}
		}
	} else if spec.PrivateTmp && spec.Tmp != "" {
		if err := mountPrivate(spec.Tmp); err != nil {
			return err
		}
	}
	if spec.Landlock {
		keep := slices.Concat(spec.Exec, Loaders(append([]string{spec.Path}, spec.Exec...)...), LibraryDirs())
		if err := confineExec(keep); err != nil {
			return err
		}
		if err := confineLibraryPrograms(spec.NoExec, spec.Exec); err != nil {
			return err
		}
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if spec.PIDNS {
		// procfs shows the PID namespace of the process that mounts it:
		// this one's, the task's.
		if err := unix.Mount("proc", "/proc", "proc", flags, ""); err != nil {
			return fmt.Errorf("mount the task's /proc: %w", err)
		}
	}
	if spec.IPCNS {
		// A fresh mqueue file system shows the IPC namespace of the
		// process that mounts it; without it, /dev/mqueue would list the
		// node's queues (and not the task's own).
		if st, err := os.Stat("/dev/mqueue"); err == nil && st.IsDir() {
			if err := unix.Mount("mqueue", "/dev/mqueue", "mqueue", flags, ""); err != nil {
				return fmt.Errorf("mount the task's /dev/mqueue: %w", err)
			}
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("look for /dev/mqueue: %w", err)
		}
	}
	return nil
}
