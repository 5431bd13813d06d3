package countfill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// Filler fills in the counts of queues inserted without them (or
// with counts that are not numbers) from their tasks, a step of the
// housekeeping (due every round): a batch of them a round (1 to
// queue.FillCountsBatch, as fast as the server takes them), in one
// aggregation and one bulk write, so that a round stays short however many
// such queues there are. Claims do not wait for it: a queue with no counts
// is left to the probe. It logs when there is such work and when it is
// done, with the queues whose counts were not numbers (someone wrote them:
// worth a look). Only the housekeeping's goroutine uses it.
type Filler struct {
	*base.Env
	// Interval is the node's pass interval: a batch that takes more than
	// a tenth of it halves the next.
	Interval time.Duration
	// batch is how many queues' counts the next round fills in, next
	// when, and filled the queues whose counts it filled in since the read
	// of every queue at filledOf.
	batch    int
	next     time.Time
	filled   map[bson.ObjectID]bool
	filledOf time.Time
}

// fill fills in a batch. queues are those of the loop's last read of
// every queue, at read: the queues it filled since are left out until the
// next.
func (f *Filler) Fill(ctx context.Context, queues []queue.Queue, read time.Time) error {
	if !read.Equal(f.filledOf) {
		f.filled, f.filledOf = map[bson.ObjectID]bool{}, read
	}
	if time.Now().Before(f.next) {
		return nil
	}
	if f.batch == 0 {
		f.batch = fillBatchMin
	}
	// The batch, and how many there are: not a copy of 80,000 queues.
	var batch []queue.Queue
	var bad []string
	todo := 0
	for i := range queues {
		q := &queues[i]
		if (q.CountTodo == nil || q.CountTotal == nil) && !f.filled[q.ID] {
			todo++
			if len(batch) < f.batch {
				batch = append(batch, *q)
			}
			if len(q.BadCounts) > 0 && len(bad) < 10 {
				bad = append(bad, fmt.Sprintf("%s (%s: %s)", metrics.Label(q.Name), q.ID.Hex(), strings.Join(q.BadCounts, ", ")))
			}
		}
	}
	if todo == 0 {
		if f.Notes.Clear("fill-counts") {
			f.Log.Info("every queue's counts are filled in")
		}
		return nil
	}
	if f.Notes.Set("fill-counts", "") {
		f.Log.Warn("queues without counts (or with counts that are not numbers): counting their tasks, a batch a pass",
			zap.Int("queues", todo), zap.String("batch", fmt.Sprintf("%d to %d queues a round, as fast as the server takes them", fillBatchMin, queue.FillCountsBatch)), zap.Strings("not_numbers", bad))
	}
	start := time.Now()
	_, err := f.Store.FillCounts(ctx, batch)
	if err == nil {
		for _, q := range batch {
			f.filled[q.ID] = true
		}
	}
	// The batch follows what the server takes: halved when a batch took
	// more than a tenth of the interval, doubled when it took a
	// hundredth, between fillBatchMin and queue.FillCountsBatch. MongoDB
	// updates by _id in microseconds; a server that scans a collection
	// for each update (the development server) takes a second for a
	// few dozen, and its one-command-at-a-time proxy holds every other
	// command (a claim among them) behind the whole bulk write.
	// And it takes a tenth of the server's time at most: a batch that
	// took d waits 9 d for the next (on the development server with
	// 80,000 queues, one queue's two updates take seconds, and its
	// one-command-at-a-time proxy holds every claim behind them).
	took := time.Since(start)
	switch {
	case took > f.Interval/10:
		f.batch = max(f.batch/2, fillBatchMin)
	case took < f.Interval/100:
		f.batch = min(f.batch*2, queue.FillCountsBatch)
	}
	f.next = time.Now().Add(9 * took)
	return err
}

// fillBatchMin is the fewest queues a round fills the counts of, however
// slow the server.
const fillBatchMin = 1
