package nodetest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/plugins/command"
)

// soak runs tasks command tasks on nodes nodes through a fault proxy that
// faults rate of every write command (a reply lost after the write, a
// NotWritablePrimary answer, a connection dropped before the command),
// and refuses every command for refusal once a third of the tasks have
// ended. Each task's program appends a line to a file of its own, so
// that a task run more often than its history says is a duplicate. It
// returns what happened; it fails tb only when the setup fails.
func soak(tb testing.TB, tasks, nodes int, rate float64, refusal time.Duration) soakResult {
	db := dentest.DB(tb)
	p := dentest.Faults(tb, 7, writeFaults(rate)...)
	faulted := p.Client(tb).Database(db.Name())
	qid := dentest.Queue(tb, db, "soak", command.Name, 4, "fifo")
	dentest.Update(tb, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 3}}}})
	dir := tb.TempDir()
	params := make([]bson.D, tasks)
	for i := range params {
		params[i] = bson.D{{Key: "shell", Value: fmt.Sprintf("echo run >> %s", filepath.Join(dir, strconv.Itoa(i)))}}
	}
	ids := dentest.Tasks(tb, db, qid, params...)
	started := time.Now()
	for i := range nodes {
		nodetest.Start(tb, faulted, fmt.Sprintf("soak-%d", i), func(c *den.Config) {
			c.URI = p.URI()
			c.Runner.Direct = true // through the proxy too
		})
	}
	ended := bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{-2, -1, 0}}}}}
	refused := false
	deadline := time.Now().Add(time.Duration(tasks)*time.Second + 5*time.Minute)
	// The queue's count_todo says how far the nodes are, in one read by
	// _id; counting the ended tasks reads every task on the development
	// server (no index serves $nin), seconds at 10,000 tasks, and every
	// node's commands wait behind it. So the exact count comes when
	// count_todo says every task ended (it may be off by a fault's double
	// decrement), and every 30 s in case it drifted the other way.
	var exactAt time.Time
	dentest.UntilBy(deadline, time.Second, func() bool {
		todo := soakTodo(tb, db, qid)
		if !refused && refusal > 0 && int64(tasks)-todo >= int64(tasks/3) {
			p.Refuse(refusal)
			refused = true
		}
		if since := time.Since(exactAt); (todo <= 0 && since >= 5*time.Second) || since >= 30*time.Second {
			exactAt = time.Now()
			return dentest.CountTasks(tb, db, ended) == int64(tasks)
		}
		return false
	})
	r := soakResult{Tasks: tasks, Took: time.Since(started), Faults: len(p.Injected())}
	r.Finished = int(dentest.CountTasks(tb, db, bson.D{{Key: "status", Value: 1}}))
	r.Stuck = tasks - int(dentest.CountTasks(tb, db, ended))
	for i, id := range ids {
		b, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		runs := strings.Count(string(b), "run\n")
		raw := dentest.Task(tb, db, id)
		history := 0
		if arr, ok := raw.Lookup("history").ArrayOK(); ok {
			vals, _ := arr.Values()
			history = len(vals)
		}
		if runs > history+1 {
			r.Duplicates++
		}
	}
	return r
}

// soakTodo reads the queue's count_todo.
func soakTodo(tb testing.TB, db *mongo.Database, qid bson.ObjectID) int64 {
	tb.Helper()
	raw, err := db.Collection("queues").FindOne(dentest.Context(tb), bson.D{{Key: "_id", Value: qid}}).Raw()
	if err != nil {
		tb.Fatalf("read the soak's queue: %v", err)
	}
	n, ok := raw.Lookup("count_todo").AsInt64OK()
	if !ok {
		return 1 // not counted yet: ask the tasks
	}
	return n
}

type soakResult struct {
	Tasks, Finished, Stuck, Duplicates, Faults int
	Took                                       time.Duration
}

func (r soakResult) String() string {
	return fmt.Sprintf("%d tasks: %d succeeded, %d stuck, %d run more often than their history says, %d faults injected, in %s",
		r.Tasks, r.Finished, r.Stuck, r.Duplicates, r.Faults, r.Took.Round(time.Second))
}

// The small soak CI runs: 200 command tasks, three nodes, 3% of writes
// faulted and every command refused for 10 s part way. Every task ends,
// none is run twice beside its history.
func TestSoakUnderFaults(t *testing.T) {
	dentest.EndToEnd(t)
	r := soak(t, 200, 3, 0.03, 10*time.Second)
	t.Log(r)
	if r.Stuck != 0 || r.Duplicates != 0 {
		t.Errorf("%s", r)
	}
}

// BenchmarkSoak is the soak of the docs (docs/operations.md), sized by
// DEN_SOAK_TASKS (default 10000), DEN_SOAK_NODES (5), DEN_SOAK_RATE (0.03)
// and DEN_SOAK_REFUSE (20s): scripts/soak.sh runs it once.
func BenchmarkSoak(b *testing.B) {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	tasks, _ := strconv.Atoi(env("DEN_SOAK_TASKS", "10000"))
	nodes, _ := strconv.Atoi(env("DEN_SOAK_NODES", "5"))
	rate, _ := strconv.ParseFloat(env("DEN_SOAK_RATE", "0.03"), 64)
	refuse, _ := time.ParseDuration(env("DEN_SOAK_REFUSE", "20s"))
	for range b.N {
		r := soak(b, tasks, nodes, rate, refuse)
		b.Log(r)
		b.ReportMetric(float64(r.Stuck), "stuck")
		b.ReportMetric(float64(r.Duplicates), "duplicates")
		b.ReportMetric(float64(r.Finished), "succeeded")
		b.ReportMetric(r.Took.Seconds(), "seconds")
	}
}
