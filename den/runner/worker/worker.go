package worker

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"

	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/plugins"
)

// Main is the body of a worker process, which its supervisor started
// (taskrunner.Process decides): it links to its supervisor (the control
// channel), takes the node's task channel tasksCh, if any, and serves
// its tasks (work) until they are over or it is asked to stop (SIGTERM,
// SIGINT). It returns the process's exit code.
func Main(spec runner.Spec, reg *plugins.Registry, log *zap.Logger, relayCtl, tasksCh *os.File) int {
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

// work connects to the database named in spec (through the node's relay
// when relayCtl is its control channel), runs the task and returns when
// its result is stored. With tasks (the node's task channel) it tells the
// node how each run ended (Report), and, when the spec allows reuse
// (Spec.Reuse; tasks.go), then runs the tasks the node hands it, one after
// another, on the same connection, until the node closes the channel. ctx
// cancellation (SIGTERM to the runner) stops the plugin, and the runner
// takes no more tasks; the result is still stored if the database answers
// within StopRecordFor. Once the node is gone (its end of the task
// channel closed), a run whose writes have not landed for GiveUpAfter is
// given up (giveup.go): work then returns a gaveUp, already logged.
// sup is the worker's link to its supervisor.
func work(ctx context.Context, spec runner.Spec, reg *plugins.Registry, log *zap.Logger, sup *link, relayCtl *os.File, live <-chan os.Signal, tasks *taskLink) error {
	client, disconnect, err := connect(spec, relayCtl, log)
	if err != nil {
		return err
	}
	defer disconnect(ctx)
	report := func(rep runner.Report) {
		if tasks == nil {
			return
		}
		if err := tasks.report(rep); err != nil {
			log.Debug("could not tell the node how the task ended", zap.Error(err))
		}
	}
	var shedder shedder
	var nodeGone <-chan struct{}
	if tasks != nil {
		nodeGone = tasks.gone
	}
	for served := 0; ; served++ {
		r := &Executor{Spec: spec, DB: client.Database(spec.Database), Plugins: reg, Log: log, supervisor: sup, LiveRequests: live,
			reused: served > 0, Report: report, NodeGone: nodeGone, Stopping: ctx.Done()}
		if tasks == nil {
			return r.Run(ctx)
		}
		runCtx, cancel := context.WithCancel(ctx)
		tasks.begin(spec.Task, cancel)
		drain(live) // a request for the run before is not one for this run
		err := r.Run(runCtx)
		tasks.end()
		cancel()
		if err != nil || !spec.Reuse {
			return err
		}
		if sup != nil {
			left, err := sup.idle(ctx)
			if err != nil || left > 0 {
				// The supervisor is gone, or could not stop all of the run
				// (a process stuck in the kernel): serve no more.
				log.Warn("this task runner takes no more tasks: its last run is not wholly stopped", zap.Int("processes_left", left), zap.Error(err))
				return nil
			}
		}
		if r.abandoned || ctx.Err() != nil {
			return nil
		}
		shedder.shed(log)
		next, ok := tasks.done(ctx, spec.Task)
		if !ok {
			return nil
		}
		if next.URI != spec.URI || next.Database != spec.Database || next.Node != spec.Node {
			return fmt.Errorf("the node handed this runner a task of another database or node (%s)", next.Task)
		}
		spec = next
	}
}

// drain empties a channel of live-output requests.
func drain(live <-chan os.Signal) {
	for {
		select {
		case <-live:
		default:
			return
		}
	}
}

// shedAfter is how much a run may allocate before shed collects and gives
// memory back: a full collection costs a few milliseconds, so it is paid
// only after a run that made the worker allocate that much (a large output
// is held, copied and encoded).
const shedAfter = 32 << 20

// shedder remembers how much the worker had allocated in all at its last
// shed, and keeps /proc/self/clear_refs open.
type shedder struct {
	allocated uint64
	clearRefs *os.File
	sample    []metrics.Sample
}

// shed readies a worker for its next run. What the run made the worker
// take (its output, held until it was written, and the encoded result)
// goes back to the kernel, so that an idle runner does not sit on it.
// Then the worker's peak RSS (VmHWM) is reset to what it holds now: a
// program the next run starts is cloned from the worker and inherits
// that peak as its own ru_maxrss, which would charge the next run (maybe
// another user's small task) with the last run's peak.
func (s *shedder) shed(log *zap.Logger) {
	// The heap's allocations in all, without stopping the world as
	// runtime.ReadMemStats does.
	if s.sample == nil {
		s.sample = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	}
	metrics.Read(s.sample)
	allocated := s.sample[0].Value.Uint64()
	if allocated-s.allocated > shedAfter {
		// Two collections: the driver keeps message buffers in a
		// sync.Pool, which holds them through one.
		runtime.GC()
		debug.FreeOSMemory()
	}
	s.allocated = allocated
	// "5" resets the peak RSS to the current RSS (Linux 4.0). The file
	// stays open: this is done after every task.
	var err error
	if s.clearRefs == nil {
		s.clearRefs, err = os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	}
	if err == nil {
		_, err = s.clearRefs.Write([]byte("5"))
	}
	if err != nil {
		log.Debug("could not reset the worker's peak RSS", zap.Error(err))
	}
}
