package den_test

import (
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// hold is a shell command whose processes hold about mb MB for four
// seconds: tail keeps its input's last line (here the whole input, one
// line without a newline) until the input ends.
func hold(mb int) string {
	return `(head -c ` + strconv.Itoa(mb*1000000) + ` /dev/zero; sleep 4) | tail > /dev/null; echo held`
}

// A task that requests memory is held to it: den kills
// the processes of a run that pass the request, records outcome
// resource_killed, and retries the task with the request times
// memory_retry_factor, each attempt's request and use kept in its history
// entry, the request that worked left in the task. The retry's request is
// capped by what the largest live den node offers; a run stopped at that
// cap is not retried, and says why.
func TestResourceRetries(t *testing.T) {
	t.Parallel()
	t.Run("retried with more memory", func(t *testing.T) {
		t.Parallel()
		db := dentest.DB(t)
		qid := dentest.Queue(t, db, "cmd", command.Name, 4, "fifo", bson.E{Key: "retry_delay", Value: 0}, bson.E{Key: "max_termination_time", Value: 1})
		grows := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: hold(120)}})[0]
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: grows}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: queue.FieldRequested, Value: bson.D{{Key: queue.FieldMemoryMB, Value: 60}, {Key: queue.FieldCPUs, Value: 0.5}}},
			{Key: queue.FieldMemoryRetryFactor, Value: 3}, {Key: "max_retries", Value: 2},
		}}})
		// Within its request: never stopped, though den's own worker (tens
		// of MB, more under -race) holds more than the 10 MiB requested.
		small := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "sleep 1.5; echo small"}})[0]
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: small}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: queue.FieldRequested, Value: bson.D{{Key: queue.FieldMemoryMB, Value: 10}}}}}})
		// Busy cores are not left out: the machine running the tests is
		// busy, and the task requests half a core.
		startNode(t, db, "n", func(c *den.Config) { c.Resources.BusyCorePercent = 100 })

		raw := dentest.WaitStatus(t, db, grows, 1)
		if mb, _ := raw.Lookup(queue.FieldRequested, queue.FieldMemoryMB).AsFloat64OK(); mb != 180 {
			t.Errorf("request that worked: memory_mb %v, want 60 x 3 = 180: %s", raw.Lookup(queue.FieldRequested), raw)
		}
		if cpus, _ := raw.Lookup(queue.FieldRequested, queue.FieldCPUs).AsFloat64OK(); cpus != 0.5 {
			t.Errorf("the retry's request keeps the cpus: %s", raw.Lookup(queue.FieldRequested))
		}
		entries, _ := raw.Lookup("history").Array().Values()
		if len(entries) != 1 {
			t.Fatalf("%d history entries, want 1 (the stopped run): %s", len(entries), raw)
		}
		first := entries[0].Document()
		kind, _ := first.Lookup("outcome").StringValueOK()
		reason, _ := first.Lookup("reason").StringValueOK()
		if kind != queue.OutcomeResourceKilled || !strings.Contains(reason, "more than the 60 MiB it requested") {
			t.Errorf("stopped run: outcome %q, reason %q; want resource_killed, more than the 60 MiB it requested", kind, reason)
		}
		if mb, _ := first.Lookup("requested_resources", "memory_mb").AsFloat64OK(); mb != 60 {
			t.Errorf("stopped run's history entry: requested %s, want memory_mb 60", first.Lookup("requested_resources"))
		}
		if u := usageOf(t, "stopped run", first); u.PeakRSSMB < 60 {
			t.Errorf("stopped run used %.1f MiB at its peak; it was stopped for passing 60", u.PeakRSSMB)
		}
		if kind, _ := raw.Lookup(queue.FieldOutcome).StringValueOK(); kind == queue.OutcomeResourceKilled {
			t.Errorf("the run that worked has outcome %q", kind)
		}
		raw = dentest.WaitStatus(t, db, small, 1)
		if _, ok := raw.Lookup("history").ArrayOK(); ok {
			t.Errorf("a task within its request was retried: %s", raw)
		}
	})
	t.Run("capped by the largest offer", func(t *testing.T) {
		t.Parallel()
		db := dentest.DB(t)
		qid := dentest.Queue(t, db, "cmd", command.Name, 4, "fifo", bson.E{Key: "retry_delay", Value: 0}, bson.E{Key: "max_termination_time", Value: 1})
		id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: hold(150)}})[0]
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: queue.FieldRequested, Value: bson.D{{Key: queue.FieldMemoryMB, Value: 60}}},
			{Key: queue.FieldMemoryRetryFactor, Value: 3}, {Key: "max_retries", Value: 5},
		}}})
		// The only node offers 100 MiB: the retry asks for 100, not 180,
		// and is stopped again; a third run would get no more.
		startNode(t, db, "n", func(c *den.Config) { c.Resources.MemoryMB = 100 })

		raw := dentest.WaitStatus(t, db, id, queue.StatusFailed)
		task, err := queue.DecodeTask(raw)
		if err != nil {
			t.Fatal(err)
		}
		if mb, _ := raw.Lookup(queue.FieldRequested, queue.FieldMemoryMB).AsFloat64OK(); mb != 100 {
			t.Errorf("last request: %s, want memory_mb 100 (the largest offer)", raw.Lookup(queue.FieldRequested))
		}
		entries, _ := raw.Lookup("history").Array().Values()
		if len(entries) != 1 {
			t.Errorf("%d history entries, want 1 (the run at 60 MiB; the run at 100 is the task's own): %s", len(entries), raw)
		}
		kind, _ := raw.Lookup(queue.FieldOutcome).StringValueOK()
		reason, _ := raw.Lookup(queue.FieldOutcomeReason).StringValueOK()
		if kind != queue.OutcomeResourceKilled || !strings.Contains(reason, "no live den node offers more") {
			t.Errorf("outcome %q, reason %q; want resource_killed, no live den node offers more", kind, reason)
		}
		stderr, _, _ := task.Output("stderr")
		if !strings.Contains(stderr, "den: not retried") || !strings.Contains(stderr, "more than the 100 MiB it requested") {
			t.Errorf("stderr %q, want why it was stopped and not retried", stderr)
		}
	})
}
