package sweep

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// This file carries out cancellation (cancel: true, den's optional field):
// a claimed task becomes -5 without running, a running one is stopped.

// cancel carries out cancel: true on this node's tasks (held, as this pass
// read them): claimed ones become -5 without running; for running ones,
// the runners stop the run (a runner this node process started is told
// over its task channel, any other's process group gets SIGTERM), and its
// runner's group gets SIGKILL after the task's max_termination_time if it
// has not recorded a result by then. (Queued
// tasks with cancel set are never claimed; the sweep records their -5.)
func (sw *Sweeper) Cancel(ctx context.Context, held []queue.Task, queues queue.ByID) error {
	now := sw.Now()
	live := map[bson.ObjectID]bool{}
	for _, task := range held {
		if !task.Cancel {
			continue
		}
		if task.Status == queue.StatusClaimed {
			if ok, err := sw.Store.CancelUnstarted(ctx, task.ID, sw.Params.Name, now); err != nil {
				return err
			} else if ok {
				sw.Metrics.Cancellations.WithLabelValues("claimed").Inc()
				sw.Log.Info("cancelled a claimed task before its runner started it", zap.String("task_id", task.ID.Hex()))
			}
			continue
		}
		r := task.Runner
		if r == nil || !sw.Pool.OnThisHost(*r) {
			continue
		}
		live[r.Token] = true
		if err := sw.Pool.StopCancelled(ctx, task, queues.Of(task), now); err != nil {
			return err
		}
	}
	// Forget runs that are over.
	sw.Pool.ForgetCancelled(live)
	return nil
}
