package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// den queue pause sets both limits to 0 (what every Perl node honours) and
// keeps what the queue had; list, show and status say it is paused; den
// queue set on a paused queue changes the limit it resumes with; resume
// restores the limits exactly, a limit the queue did not have included.
// Pausing twice, and resuming a queue that is not paused, change nothing.
func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	perNode := dentest.Queue(t, db, "resize", demo.Name, 4, "fifo")
	global := dentest.Queue(t, db, "shared", demo.Name, 0, "fifo", bson.E{Key: "threads", Value: int32(10)})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: global}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "maxthreads", Value: ""}}}})

	r := denDB(t, db, "", "queue", "pause", "resize").must(t, ExitOK)
	if !strings.Contains(r.stdout, "paused; limit: paused (resumes: 4 per node)") {
		t.Errorf("pause said %q", r.stdout)
	}
	q := queueDoc(t, db, perNode)
	paused := sub(q, "paused")
	if asInt(q["maxthreads"]) != 0 || asInt(q["threads"]) != 0 || paused == nil || asInt(paused["maxthreads"]) != 4 || paused["by"] == nil || paused["at"] == nil {
		t.Fatalf("paused queue document: %v", q)
	}
	if _, kept := paused["threads"]; kept {
		t.Errorf("pause kept a threads the queue did not have: %v", paused)
	}
	r = denDB(t, db, "", "queue", "pause", "resize").must(t, ExitOK)
	if !strings.Contains(r.stdout, "was already paused") || asInt(sub(queueDoc(t, db, perNode), "paused")["maxthreads"]) != 4 {
		t.Errorf("a second pause: %q, %v", r.stdout, queueDoc(t, db, perNode))
	}

	var rows []queueRow
	denDB(t, db, "", "queue", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 2 || rows[0].Name != "resize" || rows[0].Paused == nil || rows[0].Paused.Resumes != "4 per node" || rows[0].Limit != 0 || rows[1].Paused != nil {
		t.Errorf("queue list --json: %+v", rows)
	}
	for _, args := range [][]string{{"queue", "list"}, {"status"}} {
		if out := denDB(t, db, "", args...).must(t, ExitOK).stdout; !strings.Contains(out, "paused (resumes: 4 per node)") {
			t.Errorf("den %v does not show the pause:\n%s", args, out)
		}
	}
	if out := denDB(t, db, "", "queue", "show", "resize").must(t, ExitOK).stdout; !strings.Contains(out, "resumes with 4 per node") {
		t.Errorf("queue show does not show the pause:\n%s", out)
	}

	// A limit set on a paused queue is the one it resumes with.
	r = denDB(t, db, "", "queue", "set", "resize", "maxthreads=8", "timeout=60").must(t, ExitOK)
	if !strings.Contains(r.stdout, "applies when it is resumed") {
		t.Errorf("set on a paused queue said %q", r.stdout)
	}
	q = queueDoc(t, db, perNode)
	if asInt(q["maxthreads"]) != 0 || asInt(sub(q, "paused")["maxthreads"]) != 8 || asInt(q["timeout"]) != 60 {
		t.Errorf("set on a paused queue: %v", q)
	}
	denDB(t, db, "", "queue", "resume", "resize").must(t, ExitOK)
	q = queueDoc(t, db, perNode)
	if _, has := q["threads"]; has || asInt(q["maxthreads"]) != 8 || q["paused"] != nil {
		t.Errorf("resumed queue: %v", q)
	}
	r = denDB(t, db, "", "queue", "resume", "resize").must(t, ExitOK)
	if !strings.Contains(r.stdout, "was not paused") || asInt(queueDoc(t, db, perNode)["maxthreads"]) != 8 {
		t.Errorf("resume of a queue not paused: %q", r.stdout)
	}

	// A queue-wide limit (threads) comes back as it was, without a
	// maxthreads it never had.
	denDB(t, db, "", "queue", "pause", global.Hex(), "--json").must(t, ExitOK)
	if q := queueDoc(t, db, global); asInt(q["maxthreads"]) != 0 || asInt(q["threads"]) != 0 {
		t.Errorf("paused queue-wide queue: %v", q)
	}
	var out struct {
		Changed, Paused bool
		Limit           string
	}
	denDB(t, db, "", "queue", "resume", "shared", "--json").must(t, ExitOK).decode(t, &out)
	q = queueDoc(t, db, global)
	if _, has := q["maxthreads"]; has || asInt(q["threads"]) != 10 || q["paused"] != nil || !out.Changed || out.Paused || out.Limit != "10 (all nodes)" {
		t.Errorf("resumed queue-wide queue: %v; said %+v", q, out)
	}
	denDB(t, db, "", "queue", "pause", "nosuch").must(t, ExitError)
}

// sub is a sub-document of doc as a map (nil when it is none).
func sub(doc bson.M, key string) bson.M {
	switch v := doc[key].(type) {
	case bson.M:
		return v
	case bson.D:
		m := bson.M{}
		for _, e := range v {
			m[e.Key] = e.Value
		}
		return m
	}
	return nil
}
