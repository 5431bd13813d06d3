package bulk

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Store is what bulk needs of the operator's store (queue.OperatorStore).
type Store interface {
	SetCancel(ctx context.Context, id bson.ObjectID) (queue.CancelOutcome, error)
	RetryEnded(ctx context.Context, t queue.Task, now time.Time) (bool, error)
}

// Cancel sets cancel on each task of ids, in order, and returns each one's
// outcome (queue.CancelSet: its node or the next pass cancels it). It stops
// at the first error, with the outcomes of the tasks before it.
func Cancel(ctx context.Context, s Store, ids []bson.ObjectID) ([]queue.CancelOutcome, error) {
	outcomes := make([]queue.CancelOutcome, 0, len(ids))
	for _, id := range ids {
		o, err := s.SetCancel(ctx, id)
		if err != nil {
			return outcomes, err
		}
		outcomes = append(outcomes, o)
	}
	return outcomes, nil
}

// Retried is what Retry did.
type Retried struct {
	Tasks     []queue.Task // those put back, in order
	Skipped   int          // left alone: not ended, or changed since they were read
	Recounted int          // of Tasks, those that had finished: counted in count_todo again
	// Held are the refusals of the skipped tasks whose unique key another
	// unfinished task of their queue holds (queue.KeyHeldError), each
	// naming the task refused and the holder.
	Held []string
}

// Retry puts each ended task of tasks back in its queue (RetryEnded), in
// order, at now() each. It stops at the first error, with what it did
// before it; a task refused for its unique key is skipped (Held).
func Retry(ctx context.Context, s Store, tasks []queue.Task, now func() time.Time) (Retried, error) {
	var r Retried
	for _, t := range tasks {
		ok, err := s.RetryEnded(ctx, t, now())
		if held := (*queue.KeyHeldError)(nil); errors.As(err, &held) {
			r.Skipped++
			r.Held = append(r.Held, err.Error())
			continue
		}
		if err != nil {
			return r, err
		}
		if !ok {
			r.Skipped++
			continue
		}
		r.Tasks = append(r.Tasks, t)
		if queue.Finished(t.Status) {
			r.Recounted++
		}
	}
	return r, nil
}
