package den

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// fillCounts fills in the counts of queues inserted without them (or with
// counts that are not numbers) from their tasks: a batch of them a pass
// (10 to queue.FillCountsBatch, as fast as the server takes them), in one
// aggregation and one bulk write, so that a pass stays short however many
// such queues there are.
// It logs when there is such work and when it is done, with the queues
// whose counts were not numbers (someone wrote them: worth a look).
func (ps *passes) fillCounts(ctx context.Context, queues []queue.Queue) error {
	var todo []queue.Queue
	var bad []string
	for _, q := range queues {
		if q.CountTodo == nil || q.CountTotal == nil {
			todo = append(todo, q)
			if len(q.BadCounts) > 0 && len(bad) < 10 {
				bad = append(bad, fmt.Sprintf("%s (%s: %s)", metrics.Label(q.Name), q.ID.Hex(), strings.Join(q.BadCounts, ", ")))
			}
		}
	}
	if len(todo) == 0 {
		if ps.notes.clear("fill-counts") {
			ps.log.Info("every queue's counts are filled in")
		}
		return nil
	}
	if ps.notes.set("fill-counts", "") {
		ps.log.Warn("queues without counts (or with counts that are not numbers): counting their tasks, a batch a pass",
			zap.Int("queues", len(todo)), zap.String("batch", fmt.Sprintf("%d to %d queues a pass, as fast as the server takes them", fillBatchMin, queue.FillCountsBatch)), zap.Strings("not_numbers", bad))
	}
	if ps.fillBatch == 0 {
		ps.fillBatch = fillBatchMin
	}
	start := time.Now()
	_, err := ps.store.FillCounts(ctx, todo[:min(len(todo), ps.fillBatch)])
	// The batch follows what the server takes: halved when a batch took
	// more than a tenth of the interval, doubled when it took a
	// hundredth, between fillBatchMin and queue.FillCountsBatch. MongoDB
	// updates by _id in microseconds; a server that scans a collection
	// for each update (the development server) takes a second for a
	// few dozen, and a pass must not wait minutes behind them.
	switch took := time.Since(start); {
	case took > ps.cfg.Interval/10:
		ps.fillBatch = max(ps.fillBatch/2, fillBatchMin)
	case took < ps.cfg.Interval/100:
		ps.fillBatch = min(ps.fillBatch*2, queue.FillCountsBatch)
	}
	return err
}

// fillBatchMin is the fewest queues a pass fills the counts of, however
// slow the server.
const fillBatchMin = 10
