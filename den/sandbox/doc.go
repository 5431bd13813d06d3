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
// hold for the program.
//
// Before it executes the program, the sandbox also
//
//   - marks every descriptor from 3 up close-on-exec (fds.go): the program
//     gets stdin, stdout and stderr, nothing its callers inherited;
//   - installs a seccomp filter (seccomp.go) that refuses executable
//     memfds and execveat(AT_EMPTY_PATH), the files Landlock never sees a
//     path for;
//   - puts the program under its process limit, Spec.MaxProcesses
//     (procs.go): into the pids cgroup it is given, else under
//     RLIMIT_NPROC above what its user runs already.
//
// Reading and writing files are not restricted; neither is the network.
//
// Limit: the dynamic loader must be executable for any dynamically linked
// program to start, and run as a program (ld-linux-x86-64.so.2 FILE) it
// loads any ELF file it can read, which Landlock's execute right does not
// cover. A program that can run commands with arguments of its caller's
// choosing can therefore run any readable ELF program this way.
package sandbox
