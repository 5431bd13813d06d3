package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Name is the plugin name queues use.
const Name = "Disbatch::Plugin::Command"

func init() {
	plugins.Register(Name, Plugin{})
}

// Plugin runs external programs.
type Plugin struct{}

// Enabled reports whether a node's configuration turns the plugin on, and
// the machine can enforce its boundary (see Policy.Boundary).
func (Plugin) Enabled(config json.RawMessage) bool {
	p, err := ParsePolicy(config)
	if err != nil || !p.Enabled {
		return false
	}
	_, err = p.Boundary(ThisMachine())
	return err == nil
}

// Prepare makes, ahead of a run, what the sandbox needs of the machine and
// keeps between runs: the list of programs in the library directories
// (sandbox.LibraryPrograms), made again when packages change and every ten
// minutes. Walking the library directories costs 0.4-2.5 s of CPU; made
// here, before the run begins, it is den's work and not charged to the
// task whose run happens to find the list out of date.
func (Plugin) Prepare(_ context.Context, config json.RawMessage) {
	p, err := ParsePolicy(config)
	if err != nil || !p.Enabled {
		return
	}
	if b, err := p.Boundary(ThisMachine()); err == nil && b.Namespaces && b.Landlock {
		sandbox.LibraryPrograms()
	}
}

type params struct {
	Command []string          `bson:"command"`
	Shell   string            `bson:"shell"`
	Dir     string            `bson:"dir"`
	Env     map[string]string `bson:"env"`
	Stdin   string            `bson:"stdin"`
}

// Run runs the task's program.
func (Plugin) Run(ctx context.Context, t *queue.Task, env plugins.Env) (int, error) {
	var raw json.RawMessage
	if err := env.Config(&raw); err != nil {
		return plugins.StatusFailed, err
	}
	policy, err := ParsePolicy(raw)
	if err != nil {
		return plugins.StatusFailed, err
	}
	if !policy.Enabled {
		return plugins.StatusFailed, errors.New("command refused: the command plugin is not enabled on this node (command.enabled)")
	}
	// What the task asks that this node's policy refuses (its parameters'
	// shape, a program outside command.allow, the shell where it is off,
	// a variable it may not set) is a refusal: the task ends at once,
	// outcome refused, never retried (plugins.Refuse). Nothing has started.
	var p params
	if err := t.DecodeParameters(&p); err != nil {
		return plugins.StatusFailed, plugins.Refuse(fmt.Errorf("command refused: %w (command must be an array of strings, shell a string, env an object of strings)", err))
	}
	argv, err := argvOf(p, policy.Shell)
	if err != nil {
		return plugins.StatusFailed, plugins.Refuse(err)
	}
	path, err := policy.resolve(argv[0])
	if err != nil {
		return plugins.StatusFailed, plugins.Refuse(err)
	}
	environ, err := policy.environment(p.Env)
	if err != nil {
		return plugins.StatusFailed, plugins.Refuse(err)
	}
	// The machine's boundary is the node's, not the task's: a failure here
	// is a plain one, retried (another node may hold it).
	boundary, err := policy.Boundary(ThisMachine())
	if err != nil {
		return plugins.StatusFailed, err
	}
	// The task's own temporary directory, its TMPDIR and, unless the task
	// names one, its working directory.
	tmp, err := sandbox.NewTmp(boundary.User)
	if err != nil {
		return plugins.StatusFailed, err
	}
	defer func() {
		if err := sandbox.RemoveTmp(tmp, boundary.User); err != nil && env.Log != nil {
			env.Log.Warn("the task's temporary directory was not removed", zap.String("dir", tmp), zap.Error(err))
		}
	}()
	taskTmp, dir := taskDirs(tmp, p.Dir, boundary.PrivateTmp)
	environ = append(environ, "TMPDIR="+taskTmp)
	// The run marker goes last, so that nothing a task sets can replace it:
	// it is how a node finds this run's processes if their runner dies.
	if m, ok := os.LookupEnv(plugins.EnvRun); ok {
		environ = append(environ, plugins.EnvRun+"="+m)
	}
	// The program starts through den's sandbox, which confines it and all
	// it starts (Landlock, its user, its namespaces), then becomes the
	// program (same pid) or, in a PID namespace of the task's own, stays
	// as its init (den/sandbox, init.go).
	spec := sandbox.Spec{Path: path, Args: argv, Exec: policy.Allow, Landlock: boundary.Landlock,
		MaxProcesses: env.MaxProcesses, PidsCgroup: env.PidsCgroup, User: boundary.User, Dir: dir,
		Tmp: tmp, TmpSize: policy.TmpMB << 20, MountNS: boundary.Namespaces, PrivateTmp: boundary.PrivateTmp,
		IPCNS: boundary.Namespaces, PIDNS: boundary.PrivatePIDs, GraceMS: env.Grace.Milliseconds()}
	// The memory and CPU limits, in cgroups of the task's own where den
	// may make them (the kernel counts all the task holds and uses), else
	// RLIMIT_DATA of each process, and SCHED_IDLE.
	spec.Memory = memoryLimit(policy.MemoryMB, env.MemoryRequest)
	spec.CPU = cpuLimit(policy.CPU, env.CPURequest)
	cgroups, err := sandbox.NewTaskCgroups(spec.Memory, spec.CPU)
	if err != nil && env.Log != nil {
		env.Log.Warn("the task's cgroups were not all made; its limits hold without them", zap.Error(err))
	}
	defer cgroups.Remove()
	spec.MemoryCgroup, spec.CPUCgroup = cgroups.Memory, cgroups.CPU
	spec.Network, spec.NoNetwork, spec.Ports = networkOf(policy.Network, boundary.Namespaces)
	return runProgram(ctx, spec, environ, p.Stdin, env, argv[0])
}

// runProgram starts the program spec describes, with the task's stdin,
// waits for it (stopping it when ctx ends) and says how the task ended.
func runProgram(ctx context.Context, spec sandbox.Spec, environ []string, stdin string, env plugins.Env, name string) (int, error) {
	cmd, err := sandbox.Command(spec, environ)
	if err != nil {
		return plugins.StatusFailed, err
	}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = env.Stdout, env.Stderr
	// Its own session and process group, so that stopping it stops what it
	// started and it has no terminal; and killed if the runner dies
	// (Pdeathsig fires when the thread that started it exits, so this
	// goroutine keeps its thread until Wait). What escapes the group is
	// stopped by the runner's supervisor when the task ends (den/runner);
	// in a PID namespace, the init passes den's signals to every process
	// of the task, and nothing outlives the init.
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	// A descendant that keeps the output open after the program exits does
	// not hold the task forever.
	cmd.WaitDelay = 5 * time.Second
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return plugins.StatusFailed, fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	stopped := make(chan struct{})
	go stopOnCancel(ctx, cmd.Process.Pid, env.Grace, exited, stopped)
	err = cmd.Wait()
	close(exited)
	<-stopped
	if spec.MemoryCgroup != "" {
		if n := sandbox.OOMKills(spec.MemoryCgroup); n > 0 {
			fmt.Fprintf(env.Stderr, "\nden: the kernel killed %d process(es) of the task for passing its memory limit (%d MiB: command.memory_mb, or requested_resources.memory_mb where larger)\n", n, spec.Memory>>20)
		}
	}
	return outcome(cmd, err, env)
}

// argvOf is the program and arguments a task asks for: its command, or
// its shell line run by Shell when the node allows it (shellAllowed,
// command.shell); or why the task is refused.
func argvOf(p params, shellAllowed bool) ([]string, error) {
	switch {
	case p.Shell != "" && len(p.Command) > 0:
		return nil, errors.New("command refused: give either command or shell, not both")
	case p.Shell != "":
		if !shellAllowed {
			return nil, errors.New("command refused: the shell parameter is not allowed on this node (command.shell)")
		}
		return []string{Shell, "-c", p.Shell}, nil
	case len(p.Command) == 0:
		return nil, errors.New("command refused: the task has no command parameter (an array: program and arguments)")
	}
	return p.Command, nil
}

// taskDirs are the task's TMPDIR (its temporary directory tmp, seen as
// sandbox.TaskTmp when it is mounted privately) and its working
// directory: the one it names, else its TMPDIR.
func taskDirs(tmp, named string, privateTmp bool) (taskTmp, dir string) {
	taskTmp = tmp
	if privateTmp {
		taskTmp = sandbox.TaskTmp
	}
	if named == "" {
		return taskTmp, taskTmp
	}
	return taskTmp, named
}

// memoryLimit is a task's memory limit in bytes: command.memory_mb
// (policyMB), or the task's request where it asks for more; 0 (none) when
// the node sets none.
func memoryLimit(policyMB, request int64) int64 {
	memory := policyMB << 20
	if memory > 0 && request > memory {
		memory = request
	}
	return memory
}

// cpuLimit is a task's CPU limit in cores: command.cpu (policy), or the
// task's request where it asks for more, at most MaxCPU; 0 (none) when
// the node sets none.
func cpuLimit(policy, request float64) float64 {
	if policy > 0 && request > policy {
		return min(request, MaxCPU)
	}
	return policy
}

// networkOf is what a task may reach, as the sandbox takes it: with
// command.network none, a network namespace of its own where den may make
// one (namespaces), and Landlock's TCP rules where the kernel has them
// (each holds alone); with a list of ports, those; with all, anything.
func networkOf(n Network, namespaces bool) (mode string, noNetwork bool, ports []uint16) {
	switch {
	case n.None:
		return sandbox.NetworkNone, namespaces, nil
	case !n.All():
		return sandbox.NetworkPorts, false, n.Ports
	}
	return mode, false, nil
}

// stopOnCancel sends SIGTERM to the program's process group when ctx is
// done, then SIGKILL once grace has passed, unless by then the whole group
// is gone. The group is watched, not just the program: children that ignore
// SIGTERM after their parent exited are killed too.
func stopOnCancel(ctx context.Context, pgid int, grace time.Duration, exited <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			if syscall.Kill(-pgid, 0) != nil {
				return // the whole group is gone
			}
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// outcome turns the program's end into a status, recording exit_code or
// signal.
func outcome(cmd *sandbox.Cmd, err error, env plugins.Env) (int, error) {
	end, ok := cmd.Exit()
	if !ok {
		return plugins.StatusFailed, fmt.Errorf("wait for %s: %w", cmd.Args[0], err)
	}
	if end.Left > 0 {
		fmt.Fprintf(env.Stderr, "\nden: stopped %d process(es) the task left running when it ended\n", end.Left)
		if env.Log != nil {
			env.Log.Info("stopped processes the task left running", zap.Int("processes", end.Left))
		}
	}
	ws := end.Status
	if ws.Signaled() {
		sig := ws.Signal()
		name := signalName(sig)
		if err := env.Record("signal", name); err != nil {
			return plugins.StatusFailed, err
		}
		fmt.Fprintf(env.Stderr, "\nden: %s was killed by signal %s\n", cmd.Args[0], name)
		return plugins.StatusFailed, nil
	}
	code := ws.ExitStatus()
	if err := env.Record("exit_code", code); err != nil {
		return plugins.StatusFailed, err
	}
	if code == 0 {
		if errors.Is(err, exec.ErrWaitDelay) {
			fmt.Fprintf(env.Stderr, "\nden: %s exited but left a process holding its output; output after that was not kept\n", cmd.Args[0])
		}
		return plugins.StatusSucceeded, nil
	}
	fmt.Fprintf(env.Stderr, "\nden: %s exited with code %d\n", cmd.Args[0], code)
	return plugins.StatusFailed, nil
}

func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGILL: "SIGILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(sig), sig)
}
