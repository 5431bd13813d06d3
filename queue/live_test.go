package queue_test

import (
	"bytes"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A reader at any offset gets exactly what follows it, and learns how
// much it missed when it fell behind the kept tail.
func TestLiveStreamAfter(t *testing.T) {
	t.Parallel()
	s := queue.LiveStream{From: 10, Data: []byte("abcdef")} // offsets 10..15
	cases := []struct {
		pos     int64
		data    string
		skipped int64
	}{
		{0, "abcdef", 10},
		{10, "abcdef", 0},
		{13, "def", 0},
		{16, "", 0},
		{40, "", 0}, // a reader past the end (of an earlier run) gets nothing
	}
	for _, c := range cases {
		data, skipped := s.After(c.pos)
		if string(data) != c.data || skipped != c.skipped {
			t.Errorf("After(%d) = %q, %d; want %q, %d", c.pos, data, skipped, c.data, c.skipped)
		}
	}
}

// Live output is asked for only on tasks that have not ended, and only
// forward; it is published only by the run that has the task, read only
// as that run's, and removed by the run's final write.
func TestLiveOutputLifecycle(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{})
	running, queued := ids[0], ids[1]
	dentest.Claim(t, db, running, "n")
	now := time.Now().Truncate(time.Millisecond)
	run := queue.RunnerInfo{Token: bson.NewObjectID(), PID: 1, Host: "h"}
	if _, ok, err := store.Start(ctx, running, "n", run, now); err != nil || !ok {
		t.Fatalf("start: %v %v", ok, err)
	}

	if ok, err := store.SetLiveUntil(ctx, queued, now.Add(time.Minute)); err != nil || ok {
		t.Fatalf("SetLiveUntil on a queued task = %v, %v; want false", ok, err)
	}
	if raw := dentest.Task(t, db, queued); raw.Lookup(queue.FieldLiveUntil).Type != 0 {
		t.Fatal("live_until set on a queued task")
	}
	for _, until := range []time.Time{now.Add(time.Minute), now.Add(time.Second)} {
		if ok, err := store.SetLiveUntil(ctx, running, until); err != nil || !ok {
			t.Fatalf("SetLiveUntil = %v, %v", ok, err)
		}
	}
	task, err := store.Task(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if !task.LiveUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("live_until %v, want the later request %v", task.LiveUntil, now.Add(time.Minute))
	}
	if _, ok := task.LiveOutput(); ok {
		t.Fatal("live output before anything was published")
	}

	// Another run (an earlier one, say) cannot publish; this one can.
	other := queue.Live{Token: bson.NewObjectID(), Stdout: queue.LiveStream{Data: []byte("not mine")}}
	if ok, err := store.PublishLive(ctx, running, "n", other); err != nil || ok {
		t.Fatalf("PublishLive by another run = %v, %v", ok, err)
	}
	live := queue.Live{Token: run.Token, At: now, Stdout: queue.LiveStream{From: 3, Data: []byte("out\x00\xff")}, Stderr: queue.LiveStream{Data: []byte("err")}}
	if ok, err := store.PublishLive(ctx, running, "n", live); err != nil || !ok {
		t.Fatalf("PublishLive = %v, %v", ok, err)
	}
	task, _ = store.Task(ctx, running)
	got, ok := task.LiveOutput()
	if !ok || got.Stdout.From != 3 || !bytes.Equal(got.Stdout.Data, []byte("out\x00\xff")) || string(got.Stream(queue.StreamStderr).Data) != "err" {
		t.Fatalf("LiveOutput = %+v, %v", got, ok)
	}
	// The node's reads of its tasks leave live output out.
	mine, err := store.Held(ctx, "n", false)
	if err != nil || len(mine) != 1 || mine[0].Raw.Lookup(queue.FieldLive).Type != 0 || !mine[0].LiveUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("Mine = %v, %v", mine, err)
	}

	if ok, err := store.Finish(ctx, running, "n", run.Token, queue.Result{Status: 1, Stdout: "out", Stderr: "err"}, now); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	raw := dentest.Task(t, db, running)
	if raw.Lookup(queue.FieldLive).Type != 0 {
		t.Fatal("the final write left live output")
	}
	if ok, err := store.PublishLive(ctx, running, "n", live); err != nil || ok {
		t.Fatalf("PublishLive after the end = %v, %v", ok, err)
	}
	if ok, err := store.SetLiveUntil(ctx, running, now.Add(time.Hour)); err != nil || ok {
		t.Fatalf("SetLiveUntil after the end = %v, %v", ok, err)
	}
}
