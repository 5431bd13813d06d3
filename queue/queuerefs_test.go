package queue_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Two queues of one name: FindQueue refuses the name with an
// AmbiguousQueueError that says how many match and asks for the id, and
// each id it names finds its queue when given back (den queue ... ID).
func TestAmbiguousQueueNameAsksForAnIdThatWorks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	a := dentest.Queue(t, db, "twin", "P", 1, queue.SortFIFO)
	b := dentest.Queue(t, db, "twin", "P", 2, queue.SortFIFO)

	_, _, err := s.FindQueue(ctx, "twin")
	var amb *queue.AmbiguousQueueError
	if !errors.As(err, &amb) {
		t.Fatalf("FindQueue(twin) = %v, want an AmbiguousQueueError", err)
	}
	if amb.Ref != "twin" || len(amb.IDs) != 2 {
		t.Fatalf("the error names %q and ids %v, want twin and 2 ids", amb.Ref, amb.IDs)
	}
	if want := fmt.Sprintf(`2 queues match "twin" (%s): give the id`, strings.Join(amb.IDs, ", ")); err.Error() != want {
		t.Fatalf("the error says %q, want %q", err, want)
	}
	found := map[bson.ObjectID]bool{}
	for _, ref := range amb.IDs {
		q, problem, err := s.FindQueue(ctx, ref)
		if err != nil || problem != nil {
			t.Fatalf("FindQueue(%q), an id the error gave: %v, %v", ref, err, problem)
		}
		found[q.ID] = true
	}
	if !found[a] || !found[b] {
		t.Fatalf("the ids given found %v, want %s and %s", found, a.Hex(), b.Hex())
	}
}

// den queue set on a paused queue writes a limit into what the queue
// keeps for its resume: the queue stays paused (its limits 0), and
// resumes with the limit set while it was paused; setting the other
// limit removes the first from what it keeps.
func TestSetLimitOfAPausedQueueKeepsItForTheResume(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	s := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "P", 4, queue.SortFIFO)
	if out, err := s.PauseQueue(ctx, qid, "alice", time.Now()); err != nil || out != queue.PauseDone {
		t.Fatalf("pause: %v, %v", out, err)
	}
	doc := func() bson.Raw {
		raw, err := db.Collection(queue.QueuesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: qid}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	number := func(v bson.RawValue) any {
		if n, ok := v.AsInt64OK(); ok {
			return n
		}
		return v.Type
	}

	if err := s.UpdateQueue(ctx, qid, queue.QueueSettings{Set: bson.D{{Key: queue.SettingMaxThreads, Value: 8}}}); err != nil {
		t.Fatal(err)
	}
	d := doc()
	if got := number(d.Lookup(queue.SettingMaxThreads)); got != int64(0) {
		t.Errorf("maxthreads of the paused queue is %v, want 0 while paused", got)
	}
	if got := number(d.Lookup(queue.FieldPaused, queue.SettingMaxThreads)); got != int64(8) {
		t.Errorf("paused.maxthreads is %v, want 8", got)
	}
	if q := mustQueue(t, s, qid); q.Paused == nil || q.Paused.Limit() != "8 per node" || q.MaxThreads != 0 {
		t.Errorf("the queue reads as paused %+v, maxthreads %d; want paused, resuming with 8 per node", q.Paused, q.MaxThreads)
	}

	if err := s.UpdateQueue(ctx, qid, queue.QueueSettings{Set: bson.D{{Key: queue.SettingThreads, Value: 3}}}); err != nil {
		t.Fatal(err)
	}
	if q := mustQueue(t, s, qid); q.Paused == nil || q.Paused.Limit() != "3 on all nodes" {
		t.Errorf("after threads=3 the queue resumes with %q, want 3 on all nodes", q.Paused.Limit())
	}

	if out, err := s.ResumeQueue(ctx, qid); err != nil || out != queue.PauseDone {
		t.Fatalf("resume: %v, %v", out, err)
	}
	d = doc()
	if got := number(d.Lookup(queue.SettingThreads)); got != int64(3) {
		t.Errorf("threads after the resume is %v, want 3", got)
	}
	if v := d.Lookup(queue.SettingMaxThreads); v.Type != 0 {
		t.Errorf("maxthreads after the resume is %s, want none (threads was set)", v)
	}
	if v := d.Lookup(queue.FieldPaused); v.Type != 0 {
		t.Errorf("paused after the resume is %s, want none", v)
	}
}
