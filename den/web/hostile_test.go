package web_test

import (
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// The pages read what anyone with insert rights wrote: the corpus of
// hostile tasks, queues and nodes (dentest) beside a good queue and its
// tasks. Every page answers (no 500, no panic), shows the good queue and
// task, and a task whose output field is of another type is answered 422
// with the reason, without taking the database for failing. (Control
// characters reach the HTML escaped by html/template's rules only: a
// browser does not act on them as a terminal does.)
func TestPagesReadHostileDocuments(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	// The corpora are split among hostileShards databases, each with the
	// good fixture: every hostile task, queue and node is read by every
	// page of its shard, beside others, and every hostile task's page is
	// checked, while each page reads a sixth of the corpora and the
	// shards are served side by side. (In one database this test took 6
	// to 10 minutes on 2 cores: 282 task pages, each reading every
	// hostile queue and node, the server decoding their huge values,
	// about 1.3 s a page.)
	for shard := range hostileShards {
		t.Run(fmt.Sprintf("shard %d of %d", shard+1, hostileShards), func(t *testing.T) {
			t.Parallel()
			pagesReadHostileShard(t, shard)
		})
	}
}

// hostileShards is how many databases TestPagesReadHostileDocuments
// splits the corpora among.
const hostileShards = 6

// ofShard returns shard's part of a corpus: every hostileShards-th.
func ofShard(corpus []dentest.Hostile, shard int) []dentest.Hostile {
	var out []dentest.Hostile
	for i, h := range corpus {
		if i%hostileShards == shard {
			out = append(out, h)
		}
	}
	return out
}

func pagesReadHostileShard(t *testing.T, shard int) {
	f := newFixture(t)
	// The fields a page shows of a task, with every value; the queues'
	// and nodes' corpora, of this shard.
	shown := []string{"queue", "status", "node", "parameters", "ctime", "mtime", "stdout", "stderr", "runner", "runner.host",
		"live", "outcome", "outcome_reason", "history", "attempts", "after", "waiting", "unfit", "usage", "requested_resources", "exit_code", "signal"}
	var tasks []dentest.Hostile
	i := 0
	for _, h := range dentest.HostileTasks(f.queue, "n1", bson.D{{Key: "i", Value: 0}}) {
		for _, field := range shown {
			if strings.HasPrefix(h.What, "task "+field+" ") || strings.HasPrefix(h.What, "task _id ") || strings.HasPrefix(h.What, "task with ") {
				if i%hostileShards == shard {
					tasks = append(tasks, h)
				}
				i++
				break
			}
		}
	}
	landed := dentest.InsertHostile(t, f.db.Collection("tasks"), tasks)
	dentest.InsertHostile(t, f.db.Collection("queues"), ofShard(dentest.HostileQueues("Disbatch::Plugin::Command"), shard))
	dentest.InsertHostile(t, f.db.Collection("nodes"), ofShard(dentest.HostileNodes(), shard))
	srv := serve(t, f.db, "")
	c := client(nil)
	check := func(path string, want ...string) {
		t.Helper()
		code, body := get(t, c, srv.URL+path)
		if code >= 500 {
			t.Errorf("GET %s: %d %.300s", path, code, body)
			return
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: lacks %q", path, w)
			}
		}
	}
	check("/", "resize", "n1")
	// The lists show the newest first: the corpus, inserted last.
	check("/tasks")
	check("/tasks?queue=" + f.queue.Hex())
	check("/tasks?status=claimed,running")
	check("/tasks?node=n1")
	check("/tasks/"+f.done.Hex(), "hello")
	// Each hostile task that a page can name (an ObjectId _id), one in
	// three: its page, its output and its output as text.
	n := 0
	for i, h := range landed {
		id, ok := h.Doc[0].Value.(bson.ObjectID)
		if !ok || i%3 != 0 {
			continue
		}
		n++
		check("/tasks/" + id.Hex())
		check("/tasks/" + id.Hex() + "/output?stream=stderr")
		check("/tasks/" + id.Hex() + "/output.txt?stream=stdout")
	}
	t.Logf("%d hostile tasks' pages read", n)
	if code, body := get(t, c, srv.URL+"/"); code != 200 || strings.Contains(body, "database reads failing") {
		t.Errorf("after the hostile tasks' pages, the overview answers %d", code)
	}
}
