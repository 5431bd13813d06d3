package runners

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// liveAskEvery is how often the node repeats a reader's request for live
// output to a task's runner; each request keeps the runner publishing for
// runner.LiveFor, so two passes may be missed.
const liveAskEvery = 5 * time.Second

// askLive passes readers' requests for live output (a task's live_until,
// seen in the read of this node's tasks the pass makes anyway, so it costs
// no command) to the runners: SIGUSR1 to the runner's supervisor, which
// passes it to its worker (or, to a runner this node process started, a
// message on its task channel). Only a process proven to be
// the task's runner is signalled, and never its process group: SIGUSR1
// would end a plugin's program.
func (rs *Pool) AskLive(held []queue.Task, now time.Time) {
	seen := map[bson.ObjectID]bool{}
	for _, task := range held {
		r := task.Runner
		if task.Status != queue.StatusRunning || r == nil || !task.LiveUntil.After(now) || !rs.OnThisHost(*r) {
			continue
		}
		seen[r.Token] = true
		if last, ok := rs.liveAsked[r.Token]; ok && now.Sub(last) < liveAskEvery {
			continue
		}
		rs.liveAsked[r.Token] = now
		if !rs.act(task.ID, *r, actLive) {
			rs.Log.Debug("cannot ask a runner for live output", zap.String("task_id", task.ID.Hex()))
		}
	}
	for token := range rs.liveAsked {
		if !seen[token] {
			delete(rs.liveAsked, token)
		}
	}
}
