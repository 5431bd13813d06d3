package runner

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins"
)

// A task runner is two processes. The node starts the supervisor, which
// leads the run's session and process group and is a child subreaper; it
// starts the worker, which connects to MongoDB and runs the task. Every
// process the task starts stays below the supervisor: those whose parent
// exits are re-parented to it, not to init, however often they fork or
// call setsid. When the task ends, and before its result is recorded, the
// worker asks the supervisor to stop every process left; when the worker
// itself dies, the supervisor stops what it left and exits, and the node
// rescues the task only after that. The supervisor holds no database
// connection and runs no plugin code, so it can reap any child it is given.
//
// The two talk over a control channel (control.go); the worker alone
// talks to the node (protocol.go) and to MongoDB.
//
// A runner may serve several tasks of one queue, one after another (see
// worker_tasks.go). Each is a run of its own: the supervisor gives it a new
// token, run marker, cgroup and run proof, and measures and limits it
// from zero; the previous run's processes were all stopped before its
// result was recorded.

// Process is the body of a task-runner process: the supervisor when the
// node started it, the worker when the supervisor did. It returns the
// process's exit code. newLog builds the logger from the spec.
func Process(reg *plugins.Registry, newLog func(Spec) (*zap.Logger, error)) int {
	// First of all, before anything could start a program: no descriptor
	// this process inherited (but those it takes below, for itself) may
	// reach the task's programs, nor may the relay's control channel.
	inheritErr := sandbox.CloseInherited()
	oneProc()
	relayCtl, relayErr := takeRelayControl()
	tasksCh, tasksErr := takeInherited(EnvTasksFD, "tasks", os.Getenv(envWorker) != "")
	spec, err := SpecFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "den task-runner:", err)
		return 2
	}
	log, err := newLog(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "den task-runner:", err)
		return 2
	}
	defer log.Sync()
	if inheritErr != nil {
		log.Error("cannot keep the descriptors this runner inherited from its programs; refusing to run tasks", zap.Error(inheritErr))
		return 2
	}
	if relayErr != nil {
		log.Warn("cannot use the node's relay; connecting to MongoDB directly", zap.Error(relayErr))
	}
	if tasksErr != nil {
		log.Warn("cannot take the node's task channel; this runner serves one task", zap.Error(tasksErr))
	}
	if os.Getenv(envWorker) == "" {
		return supervise(spec, log.With(zap.String("node", spec.Node), zap.String("role", "supervisor")), relayCtl, tasksCh)
	}
	link, err := linkFromEnv()
	if err != nil {
		log.Error("task runner worker without its supervisor", zap.Error(err))
		return 2
	}
	defer link.close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Requests for live output, forwarded by the supervisor. Never reset:
	// SIGUSR1's default action would end the worker.
	live := make(chan os.Signal, 1)
	signal.Notify(live, syscall.SIGUSR1)
	var tasks *taskLink
	if tasksCh != nil {
		tasks = newTaskLink(tasksCh, live)
		defer tasks.close()
	}
	if err := work(ctx, spec, reg, log, link, relayCtl, live, tasks); err != nil {
		if !isGaveUp(err) { // else said once already, with its reason
			log.Error("task runner failed", zap.Error(err))
		}
		return 1
	}
	return 0
}

// EnvRelayFD names the file descriptor of the runner's relay control
// channel: set by a node whose runners reach MongoDB through it (the
// default; runner.relay: false turns it off), and by the supervisor for
// its worker.
const EnvRelayFD = "DEN_RELAY_FD"

// takeRelayControl returns the relay control channel this process
// inherited, or nil. It marks the descriptor close-on-exec at once and
// removes its variable from the environment, so that no program the task
// starts inherits either.
func takeRelayControl() (*os.File, error) { return takeInherited(EnvRelayFD, "relay-control", false) }

// takeInherited returns the descriptor named by the environment variable
// env, or nil when it is unset or empty, marked close-on-exec and with the
// variable removed; non-blocking when nonblock is set (a read then ends
// when the file is closed).
func takeInherited(env, name string, nonblock bool) (*os.File, error) {
	v := os.Getenv(env)
	os.Unsetenv(env)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a file descriptor", env, v)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("%s=%d: %w", env, fd, err)
	}
	unix.CloseOnExec(fd)
	if nonblock {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("%s=%d: %w", env, fd, err)
		}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// oneProc runs this process on one P (GOMAXPROCS 1) unless the
// environment sets GOMAXPROCS. A runner waits on its node, its
// supervisor and the database nearly all the time; with a second P each
// goroutine that wakes makes the runtime wake another thread to look for
// work, which finds none (measured: half of a worker's context switches
// per task). Setting it also stops the runtime's check, once a second,
// of the cgroup's CPU limit. The task's programs do not inherit it (it is
// no environment variable); an in-process plugin that wants more calls
// runtime.GOMAXPROCS itself.
func oneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
