package worker

import (
	"context"
	"math"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// measureUsage returns the run's usage now; nil, and no error, when there
// is nothing to measure it with (an Executor used in-process, without a
// supervisor).
func (t *taskRun) measureUsage(ctx context.Context, running bool) (*queue.Usage, *runner.Measured, error) {
	if t.supervisor == nil {
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := t.supervisor.usage(ctx)
	if err != nil {
		return nil, nil, err
	}
	return t.usageOf(m, running), &m, nil
}

// usageOf is the run's usage from the supervisor's measure m, with this
// process's own peak.
func (t *taskRun) usageOf(m runner.Measured, running bool) *queue.Usage {
	// This process's own peak, and that of the largest process it reaped
	// (the plugin's programs): exact, where the samples may miss a peak.
	peak := max(m.PeakRSS, m.MaxRSS)
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		switch {
		case syscall.Getrusage(who, &ru) != nil:
		case !t.reused:
			peak = max(peak, ru.Maxrss*1024)
		case who == syscall.RUSAGE_CHILDREN && ru.Maxrss > t.maxRSSBefore:
			// Grown since the run began: a program of this run.
			peak = max(peak, ru.Maxrss*1024)
		}
	}
	now := t.now()
	u := &queue.Usage{
		WallS:      round(time.Since(t.started).Seconds(), 3),
		CPUUserS:   round(m.CPUUser, 3),
		CPUSystemS: round(m.CPUSystem, 3),
		PeakRSSMB:  round(float64(peak)/(1<<20), 1),
		Samples:    m.Samples,
		At:         now,
		Running:    running,
	}
	if m.CgroupPeak > 0 {
		mb := round(float64(m.CgroupPeak)/(1<<20), 1)
		u.PeakMemoryMB = &mb
	}
	return u
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// updateUsage writes the run's usage into the task every usage_interval
// while it runs (one conditional update each), until stopped. A run
// shorter than the interval writes nothing here: its usage goes into its
// final write.
func (t *taskRun) updateUsage(ctx context.Context) (stop func()) {
	every := t.opts.UsageInterval
	if every <= 0 || t.supervisor == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			u, _, err := t.measureUsage(ctx, true)
			if err == nil {
				uctx, ucancel := context.WithTimeout(ctx, min(every, time.Minute))
				_, err = t.store.SetUsage(uctx, t.taskID, t.Spec.Node, t.info.Token, *u)
				ucancel()
			}
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				failing = true
				t.log.Warn("cannot record the run's usage; trying again each usage_interval", zap.Error(err))
			case err == nil && failing:
				failing = false
				t.log.Info("recording the run's usage again")
			}
		}
	}()
	return func() { cancel(); <-done }
}
