package claim

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// malformedPerPass is the most documents a claim round takes out of the
// way (fails, or skips), and malformedTime how long the claims of a full
// pass and the claim-only passes after it may spend on them from the
// first: beyond either, claims stop taking them until the next round or
// pass, so that a queue full of malformed
// documents costs the other queues (claimed before it: claimer.aside) and
// a task inserted meanwhile little: on MongoDB 100 take a tenth of a
// second; on a server that scans 16 MiB documents for each of their three
// commands, a few seconds each. malformedLogged is how many of them a pass
// names, one warning each; the rest are counted in one line.
const (
	malformedPerPass = 100
	malformedTime    = 5 * time.Second
	malformedLogged  = 10
)

// malformedTally is what a claim round did with malformed documents.
type malformedTally struct {
	failed, skipped int
}

// takeMalformed takes a document a claim took but that cannot be a task
// out of every claim's way for good: it fails it (status 2, the reason in
// its stderr) and counts it as done in the queue it was claimed in. Where
// the document cannot be written, it stays claimed by this node (status
// -1), which no claim matches, until the orphan reaper of a restarted
// node puts it back. Either way claiming goes on.
func (cl *Claimer) takeMalformed(ctx context.Context, m queue.MalformedClaim, tally *malformedTally) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if cl.malformedSince.IsZero() {
		cl.malformedSince = time.Now()
	}
	ok, err := cl.Store.FailClaimed(cctx, m, cl.params.Name, cl.Now())
	if err == nil && ok && !m.Queue.IsZero() {
		err = cl.Store.DecrementTodo(cctx, m.Queue)
	}
	action := "failed"
	if err != nil || !ok {
		action = "skipped"
		tally.skipped++
	} else {
		tally.failed++
	}
	cl.Metrics.Malformed.WithLabelValues("tasks", action).Inc()
	if tally.failed+tally.skipped > malformedLogged {
		return
	}
	fields := []zap.Field{zap.Stringer("task_id", m.ID), zap.String("problem", m.Reason)}
	if !m.Queue.IsZero() {
		fields = append(fields, zap.String("queue_id", m.Queue.Hex()))
	}
	switch {
	case err != nil:
		cl.Log.Warn("claimed a document that cannot be a task and cannot fail it; skipped (it stays claimed by this node)", append(fields, zap.Error(err))...)
	case !ok:
		cl.Log.Warn("claimed a document that cannot be a task; it changed before it could be failed, skipped", fields...)
	default:
		cl.Log.Warn("claimed a document that cannot be a task; failed it (reason in its stderr)", fields...)
	}
}

// report logs, once a pass, the malformed documents the pass did not name
// one by one.
func (t malformedTally) report(log *zap.Logger) {
	if t.failed+t.skipped > malformedLogged {
		log.Warn("claimed documents that cannot be tasks this pass", zap.Int("failed", t.failed), zap.Int("skipped", t.skipped), zap.Int("named_above", malformedLogged))
	}
}
