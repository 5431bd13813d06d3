package den

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// timerLate is a context in the state a loaded machine leaves one in: its
// deadline has passed (a connection's read deadline fired), but its timer
// has not run yet, so Err is still nil.
type timerLate struct {
	context.Context
	deadline time.Time
}

func (c timerLate) Deadline() (time.Time, bool) { return c.deadline, true }
func (c timerLate) Err() error                  { return nil }

// A pass that failed because its time ran out is slow, not an outage,
// also when the read's deadline fired before the context's timer.
func TestOutOfTime(t *testing.T) {
	t.Parallel()
	now := time.Now()
	readTimeout := fmt.Errorf("find tasks: connection(x) incomplete read of message header: %w", context.DeadlineExceeded)
	expired, cancel := context.WithDeadline(context.Background(), now.Add(-time.Second))
	defer cancel()
	<-expired.Done()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"context done", expired, readTimeout, true},
		{"deadline passed, timer not yet run", timerLate{context.Background(), now.Add(-time.Millisecond)}, readTimeout, true},
		{"deadline passed, another error", timerLate{context.Background(), now.Add(-time.Millisecond)}, errors.New("connection refused"), false},
		{"deadline ahead: a timeout of its own", timerLate{context.Background(), now.Add(time.Minute)}, readTimeout, false},
		{"no deadline", context.Background(), readTimeout, false},
	} {
		if got := outOfTime(c.ctx, c.err, now); got != c.want {
			t.Errorf("%s: outOfTime = %v, want %v", c.name, got, c.want)
		}
	}
}
