package bulk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/bulk"
	"github.com/den-project/den/queue"
)

// script answers SetCancel and RetryEnded from a table by task id; the
// database's own answers are tried in den/cli's and den/web's tests.
type script struct {
	cancel map[bson.ObjectID]queue.CancelOutcome
	retry  map[bson.ObjectID]bool
	fail   bson.ObjectID
	calls  int
}

var errDown = errors.New("down")

func (s *script) SetCancel(_ context.Context, id bson.ObjectID) (queue.CancelOutcome, error) {
	s.calls++
	if id == s.fail {
		return 0, errDown
	}
	return s.cancel[id], nil
}

func (s *script) RetryEnded(_ context.Context, t queue.Task, _ time.Time) (bool, error) {
	s.calls++
	if t.ID == s.fail {
		return false, errDown
	}
	return s.retry[t.ID], nil
}

func TestCancelStopsAtTheFirstError(t *testing.T) {
	a, b, c := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	s := &script{cancel: map[bson.ObjectID]queue.CancelOutcome{a: queue.CancelSet, b: queue.CancelFinished}, fail: c}
	got, err := bulk.Cancel(context.Background(), s, []bson.ObjectID{a, b, c, bson.NewObjectID()})
	if !errors.Is(err, errDown) || len(got) != 2 || got[0] != queue.CancelSet || got[1] != queue.CancelFinished || s.calls != 3 {
		t.Errorf("got %v, %v after %d calls; want [set finished], the error, after 3", got, err, s.calls)
	}
}

func TestRetryCountsWhatItDid(t *testing.T) {
	done, failed, queued := queue.Task{ID: bson.NewObjectID(), Status: queue.StatusSucceeded},
		queue.Task{ID: bson.NewObjectID(), Status: queue.StatusCancelled}, queue.Task{ID: bson.NewObjectID(), Status: queue.StatusQueued}
	s := &script{retry: map[bson.ObjectID]bool{done.ID: true, failed.ID: true}}
	r, err := bulk.Retry(context.Background(), s, []queue.Task{done, failed, queued}, time.Now)
	if err != nil || len(r.Tasks) != 2 || r.Tasks[0].ID != done.ID || r.Skipped != 1 || r.Recounted != 1 {
		t.Errorf("got %+v, %v; want the first two retried, one skipped, one recounted", r, err)
	}
	s.fail = failed.ID
	r, err = bulk.Retry(context.Background(), s, []queue.Task{done, failed, queued}, time.Now)
	if !errors.Is(err, errDown) || len(r.Tasks) != 1 {
		t.Errorf("got %+v, %v; want the first retried, then the error", r, err)
	}
}
