package den_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zapcore"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// hostileSubset is the part of the task corpus a node test runs through:
// every odd _id and every value of queue (what a claim matches but cannot
// run), and for every other field the values a decoder is most likely to
// trip on, with the deep documents and the 4 MiB parameters. The whole
// corpus is tried against every query in queue's
// TestEveryQueryReadsHostileDocuments; on the development server it is
// too slow to scan every pass of a running node.
func hostileSubset(all []dentest.Hostile) []dentest.Hostile {
	var out []dentest.Hostile
	for _, h := range all {
		switch {
		case strings.HasPrefix(h.What, "task _id "), strings.HasPrefix(h.What, "task queue "),
			strings.HasPrefix(h.What, "task with parameters"), strings.HasPrefix(h.What, "task with requested"),
			strings.HasPrefix(h.What, "task with 4 MiB"), strings.HasPrefix(h.What, "task with runner"):
			out = append(out, h)
		case strings.HasSuffix(h.What, " document"), strings.HasSuffix(h.What, " array holding the id"),
			strings.HasSuffix(h.What, " string with controls"), strings.HasSuffix(h.What, " null"):
			out = append(out, h)
		}
	}
	return out
}

// A queue full of documents that a claim matches but that cannot be run
// (an _id that is a string, an int, BinData; a queue that is an array
// holding the queue's id), and documents with every other field of a wrong
// type, cost the node no more than themselves: the good tasks queued after
// them in the same queue and in another queue run; each document a claim
// took is failed at once with the reason in its stderr, counted in
// den_malformed_documents_total and named in one warning; no claim is
// put back and retried; /readyz stays ready and no outage is reported.
func TestHostileDocumentsDoNotStallANode(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	hostileQ := dentest.Queue(t, db, "hostile", sleepPlugin, 4, "fifo")
	goodQ := dentest.Queue(t, db, "good", sleepPlugin, 4, "fifo")
	corpus := hostileSubset(dentest.HostileTasks(hostileQ, "gone", bson.D{{Key: "ms", Value: 1}}))
	// What a claim takes and cannot run: queued documents with an odd _id
	// or an array queue. The rest wait (start_after in the year 3000) but
	// for those whose start_after is what they try: a pass's sweeps,
	// rescues and counts read them all, and the claims do not have to run
	// hundreds of tasks (a runner process each) before the good ones.
	takes := func(h dentest.Hostile) bool {
		return strings.HasPrefix(h.What, "task _id ") && h.What != "task _id objectId" ||
			h.What == "task queue array holding the id" || h.What == "task queue array holding the id twice"
	}
	later := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, h := range corpus {
		if !takes(h) && !strings.HasPrefix(h.What, "task start_after ") {
			corpus[i].Doc = append(slices.Clone(h.Doc), bson.E{Key: "start_after", Value: later})
		}
	}
	landed := dentest.InsertHostile(t, db.Collection("tasks"), corpus)
	var takeable []dentest.Hostile
	for _, h := range landed {
		if takes(h) {
			takeable = append(takeable, h)
		}
	}
	if len(takeable) < 5 {
		t.Fatalf("only %d documents a claim can take but not run landed: %v", len(takeable), takeable)
	}
	// The good tasks come after the corpus: fifo claims meet the corpus
	// first.
	good := append(dentest.Tasks(t, db, hostileQ, sleepTasks(3, 1)...), dentest.Tasks(t, db, goodQ, sleepTasks(3, 1)...)...)
	node := startNode(t, db, "n", tweak)
	started := time.Now()

	// The bounds are generous, not a speed check: the development
	// server scans the whole corpus for every claim (about a second a
	// claim alone under -race, 45 s until the good tasks ran; three times
	// that with the rest of the suite beside it), and the good tasks wait
	// behind every document whose _id sorts before an ObjectId. The log
	// line below says how long it took.
	dentest.Eventually(t, 5*time.Minute, "the good tasks of both queues ran", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: good}}}, {Key: "status", Value: 1}}) == int64(len(good))
	})
	t.Logf("the good tasks ran %s after the node started", time.Since(started).Round(time.Second))
	// _ids that are dates, timestamps or booleans sort after ObjectIds:
	// claims meet them after the good tasks.
	dentest.Eventually(t, 3*time.Minute, "every document a claim can take but not run was failed", func() bool {
		for _, h := range takeable {
			if dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: h.Doc[0].Value}}}, {Key: "status", Value: 2}}) != 1 {
				return false
			}
		}
		return true
	})
	t.Logf("every takeable document was failed %s after the node started", time.Since(started).Round(time.Second))
	for _, h := range takeable {
		raw, err := db.Collection("tasks").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: h.Doc[0].Value}}}}).Raw()
		if err != nil {
			t.Errorf("%s: %v", h.What, err)
			continue
		}
		st, _ := raw.Lookup("status").AsInt64OK()
		stderr, _ := raw.Lookup("stderr").StringValueOK()
		if st != 2 || !strings.HasPrefix(stderr, "den: task not run: ") {
			t.Errorf("%s: status %d, stderr %q; want 2 and the reason", h.What, st, stderr)
		}
	}
	fams := ep.scrape(t)
	if got := value(fams, "den_malformed_documents_total", "collection", "tasks", "action", "failed"); got < float64(len(takeable)) {
		t.Errorf("den_malformed_documents_total{tasks,failed} = %v, want at least %d", got, len(takeable))
	}
	// Ready: working, even when its passes are slow (the development
	// server scans the whole corpus for every query of a pass).
	if code, body := ep.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if got := value(fams, "den_database_outage"); got != 0 {
		t.Errorf("den_database_outage = %v, want 0", got)
	}
	for _, msg := range []string{"a claim failed after it landed; task put back", "MongoDB unreachable or failing; keeping runners and retrying every interval"} {
		if n := node.Logs.FilterMessage(msg).Len(); n > 0 {
			t.Errorf("logged %q %d times", msg, n)
		}
	}
	// One warning per document taken out of the way, the first few of a
	// pass by _id and the rest in one line: never one a second.
	named := node.Logs.FilterMessageSnippet("claimed a document that cannot be a task").Len()
	if named == 0 || named > len(takeable) {
		t.Errorf("%d warnings naming a malformed document, want between 1 and %d", named, len(takeable))
	}
}

// The queue documents of the corpus (every field a node reads with a value
// of every type, odd _ids, names of 4 MiB and not UTF-8, 10,000 fields)
// cost the node no more than themselves: the good queue's tasks run; each
// unusable queue is skipped, counted and warned about once, the first few
// by _id and the rest in one line; /metrics answers with per-queue series
// that are valid and capped, and the node document stays small; /readyz
// stays ready.
func TestHostileQueuesDoNotStallANode(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	goodQ := dentest.Queue(t, db, "good", sleepPlugin, 4, "fifo")
	landed := dentest.InsertHostile(t, db.Collection("queues"), dentest.HostileQueues(sleepPlugin))
	good := dentest.Tasks(t, db, goodQ, sleepTasks(3, 1)...)
	node := startNode(t, db, "n", tweak)

	dentest.Eventually(t, 2*time.Minute, "the good queue's tasks ran", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: good}}}, {Key: "status", Value: 1}}) == int64(len(good))
	})
	fams := ep.scrape(t)
	if got := value(fams, "den_malformed_documents_total", "collection", "queues", "action", "skipped"); got < 1 {
		t.Errorf("den_malformed_documents_total{queues,skipped} = %v, want at least 1", got)
	}
	for _, name := range []string{"den_queue_count_todo", "den_tasks_running"} {
		if f := fams[name]; f != nil && len(f.GetMetric()) > metrics.QueueSeriesMax+1 {
			t.Errorf("%s: %d series, want at most %d", name, len(f.GetMetric()), metrics.QueueSeriesMax+1)
		}
	}
	// Ready: working, even when its passes are slow.
	if code, body := ep.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if got := value(fams, "den_database_outage"); got != 0 {
		t.Errorf("den_database_outage = %v, want 0", got)
	}
	raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "n"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := raw.Lookup("queues").Array().Values()
	if len(raw) > 512<<10 || len(entries) > den.NodeQueuesMax {
		t.Errorf("node document: %d bytes, %d queues; want at most 512 KiB and %d queues (of %d queue documents)", len(raw), len(entries), den.NodeQueuesMax, len(landed)+1)
	}
	for _, e := range entries {
		if name, _ := e.Document().Lookup("name").StringValueOK(); len(name) > queue.NodeQueueNameMax {
			t.Errorf("node document lists a queue name of %d bytes", len(name))
		}
	}
	// Warned about once each, and never one line per queue past the
	// first few of a pass.
	warnings := node.Logs.FilterLevelExact(zapcore.WarnLevel).Len()
	if warnings > 60 {
		t.Errorf("%d warnings for %d queue documents: one per queue or per pass, not a few per pass", warnings, len(landed))
	}
	t.Logf("%d queue documents landed; %d warnings; node document %d bytes listing %d queues", len(landed), warnings, len(raw), len(entries))
}

// A node started on a database that holds the whole corpus of hostile
// tasks, queues and nodes, and two tasks of about 16 MiB, claims a good
// task of another queue before any of its housekeeping: when that claim
// is made (the node is held there), the queued task with cancel set is
// still queued and no task of the corpus's dead node was rescued, though
// both are the housekeeping's first work; and /readyz says the node works
// although no pass has completed yet. The housekeeping follows. (On a
// server of the test's own: the development server scans the corpus and
// the large tasks for every command, one write at a time, and would
// slow every other test.)
func TestFirstClaimsComeBeforeHousekeeping(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	uri := dentest.OwnServer(t)
	client, ep, tweak := withEndpoint(t, uri)
	db := client.Database(dentest.DB(t).Name())
	t.Cleanup(func() { db.Drop(context.Background()) })
	hostileQ := dentest.Queue(t, db, "hostile", sleepPlugin, 4, "fifo")
	goodQ := dentest.Queue(t, db, "good", sleepPlugin, 4, "fifo")
	dentest.InsertHostile(t, db.Collection("tasks"), dentest.HostileTasks(hostileQ, "gone", bson.D{{Key: "ms", Value: 1}}))
	dentest.InsertHostile(t, db.Collection("queues"), dentest.HostileQueues(sleepPlugin))
	dentest.InsertHostile(t, db.Collection("nodes"), dentest.HostileNodes())
	for i := range 2 {
		dentest.TaskWith(t, db, hostileQ, bson.D{{Key: "ms", Value: 1}, {Key: "blob", Value: dentest.HugeString(16<<20 - 4<<10)}}, bson.E{Key: "big", Value: i})
	}
	cancelled := dentest.TaskWith(t, db, hostileQ, bson.D{{Key: "ms", Value: 1}}, bson.E{Key: "cancel", Value: true})
	deadNode := bson.D{{Key: "node", Value: "gone"}, {Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-1, 0}}}}}
	held := dentest.CountTasks(t, db, deadNode)
	if held == 0 {
		t.Fatal("the corpus holds no task of a dead node")
	}
	good := dentest.Tasks(t, db, goodQ, sleepTasks(1, 1)...)[0]

	claimed, release := make(chan struct{}), make(chan struct{})
	started := time.Now()
	startNode(t, db, "n", tweak, func(c *den.Config) {
		c.URI = uri
		c.BeforeHandOver = func(_ context.Context, id bson.ObjectID) {
			if id == good {
				close(claimed)
				<-release
			}
		}
	})
	// Not a speed check: on the development server every query scans
	// the corpus and the two large tasks.
	select {
	case <-claimed:
	case <-time.After(10 * time.Minute):
		t.Fatal("the good task was not claimed within 10 minutes")
	}
	t.Logf("the good task was claimed %s after the node started", time.Since(started).Round(time.Millisecond))
	code, body := ep.get(t, "/readyz")
	st, _ := dentest.Task(t, db, cancelled).Lookup("status").AsInt64OK()
	left := dentest.CountTasks(t, db, deadNode)
	close(release)
	if st != -2 {
		t.Errorf("the queued task with cancel set has status %d when the first good task is claimed; want -2: housekeeping came first", st)
	}
	if left != held {
		t.Errorf("%d of %d tasks of the dead node rescued when the first good task is claimed; want none: housekeeping came first", held-left, held)
	}
	if code != http.StatusOK || !strings.Contains(body, "working") {
		t.Errorf("/readyz during the first pass, as the node claims: %d %s; want 200 working", code, body)
	}
	t.Logf("/readyz then: %s", strings.TrimSpace(body))
	dentest.Eventually(t, 10*time.Minute, "the housekeeping to cancel the queued task with cancel set", func() bool {
		st, _ := dentest.Task(t, db, cancelled).Lookup("status").AsInt64OK()
		return st == -5
	})
	t.Logf("the housekeeping cancelled the queued task %s after the node started", time.Since(started).Round(time.Second))
}

// Documents that a claim takes but cannot run (here 150 with a string
// _id, which sort before every ObjectId) hold up no other queue: the good
// task of another queue of the same sort order is claimed after at most
// one of them, and they are all taken out of the way afterwards.
func TestMalformedDocumentsDoNotHoldUpOtherQueues(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	badQ := dentest.Queue(t, db, "bad", sleepPlugin, 1, "fifo")
	goodQ := dentest.Queue(t, db, "good", sleepPlugin, 1, "fifo")
	const bad = 150
	docs := make([]any, bad)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("bad-%03d", i)}, {Key: "queue", Value: badQ}, {Key: "status", Value: -2},
			{Key: "node", Value: -1}, {Key: "parameters", Value: bson.D{{Key: "ms", Value: 1}}}}
	}
	dentest.Insert(t, db.Collection("tasks"), docs...)
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: badQ}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: bad}, {Key: "count_total", Value: bad}}}})
	good := dentest.Tasks(t, db, goodQ, sleepTasks(1, 1)...)[0]
	taken := bson.D{{Key: "queue", Value: badQ}, {Key: "status", Value: bson.D{{Key: "$ne", Value: -2}}}}

	claimed, release := make(chan struct{}), make(chan struct{})
	startNode(t, db, "n", func(c *den.Config) {
		c.BeforeHandOver = func(_ context.Context, id bson.ObjectID) {
			if id == good {
				close(claimed)
				<-release
			}
		}
	})
	select {
	case <-claimed:
	case <-time.After(5 * time.Minute):
		t.Fatal("the good task was not claimed within 5 minutes")
	}
	n := dentest.CountTasks(t, db, taken)
	close(release)
	if n > 1 {
		t.Errorf("%d documents of the other queue were taken before the good task was claimed; want at most 1", n)
	}
	dentest.Eventually(t, 3*time.Minute, "every document that cannot be run failed", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: badQ}, {Key: "status", Value: 2}}) == bad
	})
	dentest.WaitStatus(t, db, good, 1)
}
