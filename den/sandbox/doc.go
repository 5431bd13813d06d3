// Package sandbox starts a program inside an execute boundary the kernel
// enforces: Landlock, handling only the right to execute files, so that the
// program and every process it starts can execute only the files and
// directories it was given (plus the dynamic loader that exec needs), and
// no_new_privs, so that no set-user-ID program raises its privileges.
//
// Landlock restricts the calling process for good, and a task runner must
// not be restricted (in tests it is the test binary itself). So the program
// is started through this binary: Command builds an exec.Cmd that
// re-executes it (/proc/self/exe) with the boundary in the environment
// variable EnvSpec; Main, called first thing in main() (and in the TestMain
// of test binaries that run programs), finds it there, restricts itself,
// removes EnvSpec from the environment and execve(2)s the program. The pid stays the same,
// so the process group, session and parent-death signal the caller set up
// hold for the program. With Spec.PIDNS the sandbox is instead process 1 of
// a PID namespace of the task's own, and stays there as the program's init
// (init.go): it forks the program, passes signals on, reaps, stops what the
// program left, and reports how the program ended (Cmd.Exit).
//
// Before it executes the program, the sandbox also
//
//   - marks every descriptor from 3 up close-on-exec (fds.go): the program
//     gets stdin, stdout and stderr, nothing its callers inherited;
//   - with Spec.PIDNS and Spec.IPCNS, gives the program PID and IPC
//     namespaces of its own, with their own /proc and /dev/mqueue
//     (namespaces.go), so that tasks of one user do not reach each other's
//     processes or SysV IPC, and nothing of a task outlives it;
//   - with Spec.MountNS, in a mount namespace of the program's own, makes
//     every mount noexec but the allowed paths, the loaders and the library
//     directories (mounts.go), and in the library directories every ELF
//     program command.allow does not list (libprograms.go), so that the
//     dynamic loader run as a program (ld-linux-x86-64.so.2 FILE) cannot
//     map a program that is not allowed, nor one the task wrote; and mounts
//     the task's own temporary directory, a tmpfs of Spec.TmpSize, on /tmp,
//     /var/tmp, /dev/shm and /run/lock with Spec.PrivateTmp (tmp.go);
//   - puts the program under its memory limit, Spec.Memory (memory.go):
//     into the memory cgroup it is given, else under RLIMIT_DATA; and
//     under its CPU limit, Spec.CPU (cpu.go): into the cpu cgroup it is
//     given (NewTaskCgroups makes both), else under SCHED_IDLE, which
//     bounds nothing but yields to every other process;
//   - puts the program under its process limit, Spec.MaxProcesses
//     (procs.go): into the pids cgroup it is given, else under
//     RLIMIT_NPROC above what its user runs already;
//   - becomes Spec.User, with no supplementary group and no capability
//     (user.go), and enters Spec.Dir as that user;
//   - with Landlock, also refuses signals and abstract unix socket
//     connections to processes outside the program's domain (ABI 6), and
//     restricts TCP connections to Spec.Network (ABI 4);
//   - installs a seccomp filter (seccomp.go) that refuses executable
//     memfds and execveat(AT_EMPTY_PATH), the files Landlock never sees a
//     path for, io_uring, which makes system calls no filter sees, and the
//     kernel's keyrings, which outlive the task; and, where the network is
//     restricted, every socket but those of an allowlist (unix, TCP, UDP,
//     ICMP, NETLINK_ROUTE: not Multipath TCP, SMC, vsock, ...) and TCP
//     Fast Open, connections Landlock's TCP rules do not see.
//
// Reading and writing files are restricted only by the program's user's
// permissions (and the private temporary directory).
//
// Limits: the loader still maps for execution any ELF file in the allowed
// directories, and in the library directories one that has no execute bit
// or came there after the list of their programs was made; and a program
// that already runs code of the task's choosing (an allowed interpreter)
// can map memory for execution itself. docs/security.md lists what holds
// where.
package sandbox
