package nodetest_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/plugins/demo"
)

func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{"task-runner": nodetest.RunnerRole})
}

// writeFaults are rules that fault about rate of every write command of
// the nodes and their runners (findAndModify, update, insert, delete),
// split evenly between a reply lost after the write, a NotWritablePrimary
// answer and a connection dropped before the command.
func writeFaults(rate float64) []dentest.Rule {
	var rules []dentest.Rule
	for _, cmd := range []string{"findAndModify", "update", "insert", "delete"} {
		for _, f := range []dentest.Fault{dentest.LoseReply, dentest.NotWritablePrimary, dentest.DropBefore} {
			rules = append(rules, dentest.Rule{Command: cmd, Fault: f, Rate: rate / 3})
		}
	}
	return rules
}

// Three nodes run Demo tasks while a tenth of their writes (and their
// runners') meet a fault. Every task must end: a claim whose reply was
// lost, or whose hand-over failed, is found by its node and started or
// put back, never left claimed for orphan_age (an hour here, so that the
// rescue of stale claims cannot hide it).
func TestEveryTaskEndsUnderWriteFaults(t *testing.T) {
	dentest.EndToEnd(t)
	const tasks = 150
	db := dentest.DB(t)
	p := dentest.Faults(t, 20, writeFaults(0.10)...)
	faulted := p.Client(t).Database(db.Name())
	qid := dentest.Queue(t, db, "demo", demo.Name, 5, "fifo")
	params := make([]bson.D, tasks)
	for i := range params {
		params[i] = bson.D{{Key: "commands", Value: "a"}, {Key: "noreport", Value: true}}
	}
	ids := dentest.Tasks(t, db, qid, params...)
	for i := range 3 {
		nodetest.Start(t, faulted, fmt.Sprintf("node-%d", i), func(c *den.Config) {
			c.URI = p.URI()
			c.OrphanAge = time.Hour
		})
	}
	// Ended: any status but queued (-2), claimed (-1) and running (0).
	ended := bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{-2, -1, 0}}}}}
	if !dentest.Until(200*time.Millisecond, func() bool { return dentest.CountTasks(t, db, ended) >= int64(len(ids)) }) {
		t.Fatalf("at the test's deadline, %d of %d tasks have not ended (%d faults injected): %s",
			int64(len(ids))-dentest.CountTasks(t, db, ended), len(ids), len(p.Injected()), unended(t, db))
	}
	t.Logf("%d tasks ended; %d faults injected", len(ids), len(p.Injected()))
}

// unended describes the tasks that have not ended: status, node, and
// whether a runner is recorded.
func unended(t *testing.T, db *mongo.Database) string {
	t.Helper()
	cur, err := db.Collection("tasks").Find(dentest.Context(t), bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{-2, -1, 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(dentest.Context(t), &docs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range docs {
		out = append(out, fmt.Sprintf("task %s status %v node %v runner %v mtime %v",
			d.Lookup("_id").ObjectID().Hex(), d.Lookup("status"), d.Lookup("node"), d.Lookup("runner").Type != 0, d.Lookup("mtime")))
	}
	return strings.Join(out, "; ")
}

// A claim whose reply was lost, and whose put-back failed too, leaves a
// task claimed by the node with no runner. The node reads its own claims
// every full pass: it must start that task or put it back, not leave it
// for orphan_age (an hour here).
func TestLostClaimIsNotLeftClaimed(t *testing.T) {
	dentest.EndToEnd(t)
	db := dentest.DB(t)
	// The first claim lands with its reply lost; from then on every
	// update of tasks fails (the put-back of the lost claim first) until
	// the test lifts the faults.
	p := dentest.Faults(t, 1,
		dentest.Rule{Command: "findAndModify", Collection: "tasks", Fault: dentest.LoseReply, Nth: 1},
		dentest.Rule{Command: "update", Collection: "tasks", Fault: dentest.DropBefore, Rate: 1, After: 1})
	faulted := p.Client(t).Database(db.Name())
	qid := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "commands", Value: "a"}, {Key: "noreport", Value: true}})
	nodetest.Start(t, faulted, "node-0", func(c *den.Config) {
		c.URI = p.URI()
		c.OrphanAge = time.Hour
	})
	dentest.Eventually(t, 2*time.Minute, "the claim's reply lost and an update of tasks failed after it", func() bool {
		lost := false
		for _, f := range p.Injected() {
			if f.Fault == dentest.LoseReply {
				lost = true
			} else if lost && f.Command == "update" {
				return true
			}
		}
		return false
	})
	if n := dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: ids[0]}, {Key: "status", Value: -1}, {Key: "node", Value: "node-0"}}); n != 1 {
		t.Fatalf("the task whose claim reply was lost is not claimed by node-0: %s", unended(t, db))
	}
	p.Set()
	if !dentest.Until(100*time.Millisecond, func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: ids[0]}, {Key: "status", Value: 1}}) == 1
	}) {
		t.Fatalf("at the test's deadline, long after the faults ended, the task has not run: %s", unended(t, db))
	}
}

// During an election (no primary: commands refused, handshakes dropped) a
// node keeps its runner and its running task, says it is not ready,
// logs the outage once and its end once; after it, the task's result is
// recorded and the node is ready again.
func TestElection(t *testing.T) {
	dentest.EndToEnd(t)
	db := dentest.DB(t)
	p := dentest.Faults(t, 1)
	faulted := p.Client(t).Database(db.Name())
	dir := t.TempDir()
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	// The task runs until the test lets it end.
	script := fmt.Sprintf("touch %[1]s/started; while [ ! -e %[1]s/end ]; do sleep 0.1; done; echo done; touch %[1]s/ended", dir)
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}})[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node := nodetest.Start(t, faulted, "node-0", func(c *den.Config) {
		c.URI = p.URI()
		c.HTTP = ln
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	running := bson.D{{Key: "_id", Value: id}, {Key: "status", Value: 0}}
	dentest.Eventually(t, 2*time.Minute, "the task running", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil && dentest.CountTasks(t, db, running) == 1
	})
	dentest.Eventually(t, time.Minute, "/readyz ready before the election", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
	p.Refuse(time.Hour)
	dentest.Eventually(t, time.Minute, "/readyz not ready during the election", func() bool {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "MongoDB unreachable or failing")
	})
	// The task's program ends during the election: its runner cannot
	// record the result yet, and is not stopped.
	if err := os.WriteFile(filepath.Join(dir, "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dentest.Eventually(t, time.Minute, "the task's program ended", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ended"))
		return err == nil
	})
	if n := dentest.CountTasks(t, db, running); n != 1 {
		t.Fatalf("during the election the task is no longer running (status 0): %s", unended(t, db))
	}
	p.Refuse(0)
	dentest.Eventually(t, 2*time.Minute, "the task's result recorded after the election", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: id}, {Key: "status", Value: 1}}) == 1
	})
	dentest.Eventually(t, time.Minute, "/readyz ready after the election", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
	if out := dentest.Task(t, db, id).Lookup("stdout").StringValue(); out != "done\n" {
		t.Fatalf("stdout %q, want the program's one line", out)
	}
	for msg, want := range map[string]int{
		"MongoDB unreachable or failing; keeping runners and retrying every interval": 1,
		"MongoDB reachable again": 1,
	} {
		if n := node.Logs.FilterMessage(msg).Len(); n != want {
			t.Errorf("the node logged %q %d times, want %d", msg, n, want)
		}
	}
}
