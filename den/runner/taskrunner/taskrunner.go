package taskrunner

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/supervisor"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins"
)

// Process is the body of a task-runner process: the supervisor when the
// node started it, the worker when the supervisor did. It returns the
// process's exit code. newLog builds the logger from the spec.
func Process(reg *plugins.Registry, newLog func(runner.Spec) (*zap.Logger, error)) int {
	// First of all, before anything could start a program: no descriptor
	// this process inherited (but those it takes below, for itself) may
	// reach the task's programs, nor may the relay's control channel.
	inheritErr := sandbox.CloseInherited()
	oneProc()
	relayCtl, relayErr := takeRelayControl()
	tasksCh, tasksErr := takeInherited(runner.EnvTasksFD, "tasks", os.Getenv(runner.EnvWorker) != "")
	spec, err := runner.SpecFromEnv()
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
	if os.Getenv(runner.EnvWorker) == "" {
		return supervisor.Main(spec, log.With(zap.String("node", spec.Node), zap.String("role", "supervisor")), relayCtl, tasksCh)
	}
	return worker.Main(spec, reg, log, relayCtl, tasksCh)
}

// takeRelayControl returns the relay control channel this process
// inherited, or nil. It marks the descriptor close-on-exec at once and
// removes its variable from the environment, so that no program the task
// starts inherits either.
func takeRelayControl() (*os.File, error) {
	return takeInherited(runner.EnvRelayFD, "relay-control", false)
}

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
