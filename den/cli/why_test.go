package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// nodeDoc inserts a node document as a node writes it, serving queues.
func nodeDoc(t *testing.T, db *mongo.Database, name string, at time.Time, extra bson.D, queues ...bson.ObjectID) {
	t.Helper()
	entries := bson.A{}
	for _, q := range queues {
		entries = append(entries, bson.D{{Key: "name", Value: "q"}, {Key: "id", Value: q.Hex()}, {Key: "constructor", Value: demo.Name}, {Key: "maxthreads", Value: 1}})
	}
	dentest.Insert(t, db.Collection("nodes"), append(bson.D{{Key: "node", Value: name}, {Key: "timestamp", Value: at}, {Key: "queues", Value: entries}}, extra...))
}

// why runs den task why --json and returns its first code and every code.
func why(t *testing.T, db *mongo.Database, id bson.ObjectID) (string, []string) {
	t.Helper()
	var out struct {
		Code    string
		Reasons []queue.Reason
	}
	denDB(t, db, "", "task", "why", id.Hex(), "--json").must(t, ExitOK).decode(t, &out)
	var codes []string
	for _, r := range out.Reasons {
		codes = append(codes, r.Code)
	}
	return out.Code, codes
}

// den task why says, from the database alone, why each task has not
// started, with a stable code: no live node, no live node serving the
// queue (a dead or stopped node's document does not count), a paused
// queue, a limit of 0, a full queue, start_after, dependencies, a request
// no node meets, a cancel; and a task nothing holds says how many go
// before it. den task show and den status say it too.
func TestTaskWhy(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	now := time.Now()
	served := dentest.Queue(t, db, "served", demo.Name, 1, "fifo")
	nobody := dentest.Queue(t, db, "nobody", "No::Such::Plugin", 2, "fifo")
	zero := dentest.Queue(t, db, "zero", demo.Name, 0, "fifo")
	pausedQ := dentest.Queue(t, db, "paused", demo.Name, 3, "fifo")
	ready := dentest.Tasks(t, db, served, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}})
	lonely := dentest.Tasks(t, db, nobody, bson.D{})[0]

	if code, _ := why(t, db, lonely); code != queue.WhyNoLiveNode {
		t.Errorf("with no node document: %s, want %s", code, queue.WhyNoLiveNode)
	}
	// A dead node and a stopped one list the queue; the live node does not.
	nodeDoc(t, db, "dead", now.Add(-time.Hour), nil, nobody)
	nodeDoc(t, db, "stopped", now.Add(-time.Second), bson.D{{Key: "stopped", Value: now.Add(-time.Second)}}, nobody)
	if code, _ := why(t, db, lonely); code != queue.WhyNoLiveNode {
		t.Errorf("with a dead and a stopped node: %s, want %s", code, queue.WhyNoLiveNode)
	}
	nodeDoc(t, db, "live", now.Add(time.Minute), nil, served, zero, pausedQ)
	if code, _ := why(t, db, lonely); code != queue.WhyNoNodeServes {
		t.Errorf("a queue no live node serves: %s, want %s", code, queue.WhyNoNodeServes)
	}
	r := denDB(t, db, "", "task", "why", lonely.Hex()).must(t, ExitOK)
	if !strings.Contains(r.stdout, "no_node_serves: none of the 1 live nodes serves queue nobody: none has its plugin No::Such::Plugin") {
		t.Errorf("den task why said:\n%s", r.stdout)
	}

	if code, _ := why(t, db, ready[0]); code != queue.WhyReady {
		t.Errorf("a task nothing holds: %s, want %s", code, queue.WhyReady)
	}
	r = denDB(t, db, "", "task", "why", ready[1].Hex()).must(t, ExitOK)
	if !strings.Contains(r.stdout, "after the 1 queued before it (fifo)") {
		t.Errorf("the second task of a fifo queue: %s", r.stdout)
	}
	// One running on the only node that serves it, at maxthreads 1.
	setTask(t, db, ready[0], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "live"}})
	if code, _ := why(t, db, ready[1]); code != queue.WhyFull {
		t.Errorf("a full queue: %s, want %s", code, queue.WhyFull)
	}
	if code, _ := why(t, db, ready[0]); code != queue.WhyRunning {
		t.Errorf("a running task: %s, want %s", code, queue.WhyRunning)
	}

	zeroTask := dentest.Tasks(t, db, zero, bson.D{})[0]
	if code, _ := why(t, db, zeroTask); code != queue.WhyMaxThreadsZero {
		t.Errorf("maxthreads 0: %s, want %s", code, queue.WhyMaxThreadsZero)
	}
	pausedTask := dentest.Tasks(t, db, pausedQ, bson.D{})[0]
	denDB(t, db, "", "queue", "pause", "paused").must(t, ExitOK)
	if code, _ := why(t, db, pausedTask); code != queue.WhyPaused {
		t.Errorf("a paused queue: %s, want %s", code, queue.WhyPaused)
	}
	if out := denDB(t, db, "", "task", "show", pausedTask.Hex()).must(t, ExitOK).stdout; !strings.Contains(out, "why: paused: queue paused is paused since") {
		t.Errorf("den task show does not say why:\n%s", out)
	}

	// The task's own reasons come first, its queue's after them.
	later := dentest.Tasks(t, db, pausedQ, bson.D{})[0]
	setTask(t, db, later, bson.D{{Key: "start_after", Value: now.Add(time.Hour)}, {Key: "unfit", Value: "requests 5000 MiB; the largest live den node offers 1000 MiB"}})
	if code, codes := why(t, db, later); code != queue.WhyStartAfter || strings.Join(codes, ",") != "start_after,unfit,paused" {
		t.Errorf("start_after, unfit and paused: %s %v", code, codes)
	}
	after := dentest.Tasks(t, db, served, bson.D{})[0]
	setTask(t, db, after, bson.D{{Key: "status", Value: -4}, {Key: "after", Value: bson.A{ready[0]}}, {Key: "waiting", Value: bson.A{ready[0]}}})
	if code, _ := why(t, db, after); code != queue.WhyDependencies {
		t.Errorf("waiting for another task: %s, want %s", code, queue.WhyDependencies)
	}
	cancelled := dentest.Tasks(t, db, served, bson.D{})[0]
	setTask(t, db, cancelled, bson.D{{Key: "cancel", Value: true}})
	if code, _ := why(t, db, cancelled); code != queue.WhyCancelRequested {
		t.Errorf("cancel requested: %s, want %s", code, queue.WhyCancelRequested)
	}
	denDB(t, db, "", "task", "why", bson.NewObjectID().Hex()).must(t, ExitError)

	// den status: the queues whose tasks wait, with the first reason.
	out := denDB(t, db, "", "status").must(t, ExitOK).stdout
	for _, want := range []string{"WHY QUEUED TASKS WAIT", "nobody", "no_node_serves", "paused", "zero", "maxthreads_zero", "full"} {
		if !strings.Contains(out, want) {
			t.Errorf("den status lacks %q:\n%s", want, out)
		}
	}
	var st struct {
		Held []struct {
			QueueName string `json:"queue_name"`
			Code      string
		} `json:"held_queues"`
	}
	denDB(t, db, "", "status", "--json").must(t, ExitOK).decode(t, &st)
	codes := map[string]string{}
	for _, h := range st.Held {
		codes[h.QueueName] = h.Code
	}
	if codes["nobody"] != queue.WhyNoNodeServes || codes["paused"] != queue.WhyPaused || codes["zero"] != queue.WhyMaxThreadsZero || codes["served"] != queue.WhyFull {
		t.Errorf("den status --json held_queues: %+v", st.Held)
	}
}

// A task of a queue at its rate limit waits for it, and den task why says
// until when; once the oldest start has left the window, nothing holds it.
func TestTaskWhyRateLimit(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	qid := dentest.Queue(t, db, "limited", demo.Name, 5, "fifo",
		bson.E{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 60}}})
	task := dentest.Tasks(t, db, qid, bson.D{})[0]
	nodeDoc(t, db, "live", time.Now().Add(time.Minute), nil, qid)
	if code, _ := why(t, db, task); code != queue.WhyReady {
		t.Errorf("a rate-limited queue with no start yet: %s, want %s", code, queue.WhyReady)
	}
	// Two starts, as nodes take them: the window is full for a minute
	// from the first.
	rates := queue.NewRateLimits(db)
	l := queue.RateLimit{Starts: 2, Per: time.Minute}
	first := time.Now().Add(-20 * time.Second)
	for _, at := range []time.Time{first, first.Add(5 * time.Second)} {
		if g, err := rates.Take(ctx, qid, l, bson.NewObjectID(), "live", at); !g.OK || err != nil {
			t.Fatalf("take a start: %v, %v", g.OK, err)
		}
	}
	if code, _ := why(t, db, task); code != queue.WhyRateLimit {
		t.Fatalf("a queue at its rate limit: %s, want %s", code, queue.WhyRateLimit)
	}
	r := denDB(t, db, "", "task", "why", task.Hex()).must(t, ExitOK)
	next := first.Add(time.Minute).UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
	if !strings.Contains(r.stdout, "rate_limit: queue limited is at its rate limit (2 starts in any 1m0s, on all den nodes): the next start may come at "+next) {
		t.Errorf("den task why said:\n%s\nwant the next start at %s", r.stdout, next)
	}
}
