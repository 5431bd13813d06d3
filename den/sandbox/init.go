package sandbox

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// With Spec.PIDNS the sandbox is process 1 of the task's PID namespace,
// and stays there as the task's init: the program cannot be, since the
// kernel gives process 1 of a namespace no signal it has no handler for
// (a shell would never see den's SIGTERM) and kills the whole namespace
// when it exits. The init
//
//   - starts the program (fork and execve, as the task's user, in a
//     process group of its own), after it has put itself under the task's
//     Landlock domain, no_new_privs and seccomp filters, which the program
//     inherits; it keeps its own user (den's) and capabilities, which the
//     program does not get (the program's user has no access to it: it is
//     not dumpable, so neither /proc/1's descriptors nor ptrace reach it);
//   - starts the program in the run's pids cgroup and the task's memory
//     and cpu cgroups, from a thread it moves there alone and back, so
//     that only the task's processes count against max_processes, its
//     memory limit and its CPU quota;
//   - passes each signal it gets (den's SIGTERM when the task is stopped)
//     to every process of the namespace, and reaps them;
//   - when the program exits, gives what it left running SIGTERM, then
//     SIGKILL after Spec.GraceMS (the kernel kills what is left when the
//     init exits), reports the program's wait status and how many
//     processes it left on Spec.ReportFD, and exits 0.
//
// When the init itself is killed (den's SIGKILL at the end of a stop's
// grace, or the runner's death), the kernel kills every process of the
// namespace with it. Nothing of the task outlives it.

// forwarded are the signals the init passes to every process of the
// task; the others it does not catch (SIGKILL and SIGSTOP from den, the
// only ones the kernel delivers to a namespace's init without a handler,
// act on the init).
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}

// runInit starts the program and serves as its namespace's init; it
// returns only if the program could not be started.
func runInit(spec Spec, env []string) error {
	// Not dumpable: /proc/1/fd and ptrace are closed to the program's
	// user, also when it is den's own (command.user_optional).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the init not dumpable: %w", err)
	}
	if err := passNoCapabilities(); err != nil {
		return err
	}
	if err := confine(spec); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true}}
	if spec.User != nil {
		// setgroups (none), setgid, setuid, then the working directory,
		// entered as the program's user.
		attr.Sys.Credential = &syscall.Credential{Uid: spec.User.Uid, Gid: spec.User.Gid, Groups: []uint32{}}
	}
	// The program starts in the run's pids cgroup and the task's memory
	// and cpu cgroups (this thread, which forks it, goes in alone and back
	// out; enter locked it), or under RLIMIT_DATA, which this process sets
	// for itself and the program inherits, and SCHED_IDLE, which this
	// thread keeps (it is the task's init).
	pids := spec.PidsCgroup != "" && spec.MaxProcesses > 0
	if pids {
		if err := moveThread(spec.PidsCgroup); err != nil {
			return fmt.Errorf("join the run's pids cgroup %s: %w", spec.PidsCgroup, err)
		}
	}
	if err := limitMemory(spec, true); err != nil {
		return err
	}
	if err := limitCPU(spec, true); err != nil {
		return err
	}
	pid, err := syscall.ForkExec(spec.Path, spec.Args, attr)
	for i, dir := range []string{spec.PidsCgroup, spec.MemoryCgroup, spec.CPUCgroup} {
		if dir == "" || (i == 0 && !pids) || (i == 2 && dir == spec.MemoryCgroup) {
			continue
		}
		if err := moveThread(filepath.Dir(dir)); err != nil && pid > 0 {
			// The init's thread then counts against the task's limit.
			fmt.Fprintf(os.Stderr, "den: sandbox: leave the task's cgroup %s: %v\n", dir, err)
		}
	}
	if err != nil {
		// The child fails at any of its steps with one errno: say them.
		what := "execute " + spec.Path
		if spec.Dir != "" {
			what += ", entering " + spec.Dir
		}
		if spec.User != nil {
			what += fmt.Sprintf(" as uid %d", spec.User.Uid)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	ws, left := serve(pid, sigs, time.Duration(spec.GraceMS)*time.Millisecond)
	if spec.ReportFD > 0 {
		report := os.NewFile(uintptr(spec.ReportFD), "report")
		fmt.Fprintf(report, "%d %d\n", uint32(ws), left)
		report.Close()
	}
	os.Exit(0)
	return nil
}

// serve is the init's work once the program runs: pass on signals, reap,
// and once the program has exited, stop what it left. It returns the
// program's wait status and how many processes it left.
func serve(program int, sigs <-chan os.Signal, grace time.Duration) (syscall.WaitStatus, int) {
	var status syscall.WaitStatus
	ended := false
	reap := func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				return
			}
			if pid == program {
				status, ended = ws, true
			}
		}
	}
	// SIGCHLDs can merge; a slow tick makes sure none is missed.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	stopping := false // SIGTERM (or the like) already went to every process
	pass := func(sig os.Signal) {
		if sig == syscall.SIGCHLD {
			return
		}
		syscall.Kill(-1, sig.(syscall.Signal))
		switch sig {
		case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
			stopping = true
		}
	}
	for reap(); !ended; reap() {
		select {
		case sig := <-sigs:
			pass(sig)
		case <-tick.C:
		}
	}
	left := others()
	if left == 0 {
		return status, 0
	}
	if !stopping {
		syscall.Kill(-1, syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for reap(); others() > 0; reap() {
		select {
		case sig := <-sigs:
			pass(sig)
		case <-poll.C:
		case <-deadline.C:
			// The kernel kills the rest as the init exits; SIGKILL now
			// spares them the wait for the report.
			syscall.Kill(-1, syscall.SIGKILL)
			return status, left
		}
	}
	return status, left
}

// others counts the processes of this PID namespace but its init, from
// its /proc (mountTask mounted it).
func others() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 {
			n++
		}
	}
	return n
}

// passNoCapabilities clears this process's ambient and inheritable
// capability sets, keeping its permitted and effective ones: a program it
// starts, as another user or not, gets none of them at execve (and
// no_new_privs keeps file capabilities and set-user-ID bits from giving
// any).
func passNoCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read this process's capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	return nil
}
