package schedule

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/metrics"
)

// Params is what the scheduler reads of the configuration.
type Params struct {
	RefreshEvery time.Duration
}

// scheduler fires the schedules in the schedules collection (package
// queue: exactly one task per scheduled time, whichever nodes fire).
// It costs the database one query every RefreshEvery, and, when a
// schedule's time has come, the work of firing it: between, it knows the
// earliest next time from the last time it looked, so that a schedule
// added meanwhile is seen within RefreshEvery and a known one fires on
// the pass its time comes.
type Scheduler struct {
	*base.Env
	Params Params
	// looked is when it last read the schedules; next, the earliest next
	// time they had (zero: none).
	looked, next time.Time
}

// due reports whether a pass should fire schedules now.
func (sc *Scheduler) Due(now time.Time) bool {
	return now.Sub(sc.looked) >= sc.Params.RefreshEvery || (!sc.next.IsZero() && !now.Before(sc.next))
}

// fire inserts the tasks whose time has come. A schedule that cannot
// fire is logged when that starts and when it clears.
func (sc *Scheduler) Fire(ctx context.Context, now time.Time) error {
	f, err := sc.Store.FireDue(ctx, now)
	if err != nil {
		return err
	}
	sc.looked, sc.next = now, f.Next
	for _, id := range f.Inserted {
		sc.Log.Debug("scheduled task inserted", zap.String("task_id", id.Hex()))
	}
	if f.Skipped > 0 {
		sc.Log.Info("scheduled times skipped (missed while no node fired them, or the last task has not ended)", zap.Int("skipped", f.Skipped))
	}
	seen := map[string]bool{}
	for name, problem := range f.Problems {
		seen["schedule "+name] = true
		if sc.Notes.Set("schedule "+name, problem) {
			sc.Log.Warn("a schedule cannot fire; fix or delete it (den schedule show)", zap.String("schedule", metrics.Label(name)), zap.String("problem", problem))
		}
	}
	for _, key := range sc.Notes.Keep("schedule ", seen) {
		sc.Log.Info("a schedule can fire again, or is gone", zap.String("schedule", metrics.Label(key[len("schedule "):])))
	}
	return nil
}
