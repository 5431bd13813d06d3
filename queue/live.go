package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Live output: what a running task has printed so far, published in its
// task document only while somebody watches it (den output --follow, the
// web page), so that a task nobody watches costs nothing extra.
//
// A reader asks for it by setting live_until (SetLiveUntil) to a time a few
// tens of seconds ahead, and renews it while it reads. The node that runs
// the task sees live_until in the read of its own tasks it makes every
// pass anyway, and signals the task's runner (SIGUSR1 to its supervisor,
// which passes it to the worker); the runner then writes live (PublishLive)
// about once a second while its output grows, for as long as it keeps
// being asked. The runner's final write removes live and stores the
// output as Disbatch does (stdout and stderr). A Perl Disbatch node and
// its tools ignore both fields.
//
// live holds, per stream, the last LiveTail bytes the task wrote and the
// offset they start at in the stream, so a reader that has printed up to
// offset p prints what follows p, and knows when it fell behind by more
// than the tail (its bytes were not kept). Offsets count bytes of the
// stream as it is finally stored, so a reader goes on from the stored
// output with the same offset when the task has ended.

const (
	// FieldLiveUntil is the time until which a reader wants live output.
	FieldLiveUntil = "live_until"
	// FieldLive is the live output sub-document.
	FieldLive = "live"
	// LiveTail is the most of each stream live output keeps: its last
	// bytes.
	LiveTail = 256 << 10
	// LiveLease is how far ahead SetLiveUntil asks; readers renew it well
	// before it runs out (every LiveLease/3).
	LiveLease = 30 * time.Second
)

// LiveStream is the last part of one stream of a running task: Data are
// the bytes at offsets [From, From+len(Data)).
type LiveStream struct {
	From int64  `bson:"from"`
	Data []byte `bson:"data"`
}

// End is the offset just past the stream's last byte.
func (s LiveStream) End() int64 { return s.From + int64(len(s.Data)) }

// After returns what a reader that has printed up to offset pos has not
// seen yet, and how many bytes between pos and the tail were not kept.
func (s LiveStream) After(pos int64) (data []byte, skipped int64) {
	if pos >= s.End() {
		return nil, 0
	}
	if pos < s.From {
		return s.Data, s.From - pos
	}
	return s.Data[pos-s.From:], 0
}

// Live is a running task's live output, as its runner last published it.
type Live struct {
	// Token is the run that wrote it (the task's runner.token then): live
	// output of an earlier run is never taken for this one's.
	Token  bson.ObjectID `bson:"token"`
	At     time.Time     `bson:"at"`
	Stdout LiveStream    `bson:"stdout"`
	Stderr LiveStream    `bson:"stderr"`
}

// Stream returns the stdout or stderr part.
func (l Live) Stream(stream string) LiveStream {
	if stream == StreamStderr {
		return l.Stderr
	}
	return l.Stdout
}

// LiveOutput returns a task's live output when it is running and what is
// published is its current run's; ok is false otherwise (nothing published,
// or the task is not running).
func (t Task) LiveOutput() (live Live, ok bool) {
	if t.Status != StatusRunning || t.Runner == nil {
		return live, false
	}
	doc, isDoc := t.Raw.Lookup(FieldLive).DocumentOK()
	if !isDoc || bson.Unmarshal(doc, &live) != nil {
		return Live{}, false
	}
	return live, live.Token == t.Runner.Token
}

// SetLiveUntil asks for a task's live output until until (a reader renews it
// while it reads). Only a task that has not ended is changed, and live_until
// only moves forward. It reports whether the task is still claimed or
// running.
func (s *Store) SetLiveUntil(ctx context.Context, taskID bson.ObjectID, until time.Time) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: taskID}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusClaimed, StatusRunning}}}}},
		bson.D{{Key: "$max", Value: bson.D{{Key: FieldLiveUntil, Value: until}}}})
	if err != nil {
		return false, fmt.Errorf("ask for live output of task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// PublishLive writes a run's live output into its task. It reports false,
// and writes nothing, when the task is no longer that run's.
func (s *Store) PublishLive(ctx context.Context, taskID bson.ObjectID, node string, live Live) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx, running(taskID, node, live.Token),
		bson.D{{Key: "$set", Value: bson.D{{Key: FieldLive, Value: live}}}})
	if err != nil {
		return false, fmt.Errorf("publish live output of task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}

// unsetLive is the $unset of the updates that end a run: its live output
// goes with it.
var unsetLive = bson.E{Key: FieldLive, Value: ""}
