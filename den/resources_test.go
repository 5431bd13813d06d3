package den_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	hostmem "github.com/shirou/gopsutil/v4/mem"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// Resource-aware claiming on a real node with 1000 MiB and 4
// cores to give: two tasks requesting 600 MiB never run together, a task
// without a request runs beside them as before, one requesting more than
// the node has stays queued; a queue's request (3 cores) holds for each of
// its tasks; an unreadable request fails the task with the reason.
func TestResourceAwareClaiming(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "q", sleepPlugin, 8, "fifo")
	wide := dentest.Queue(t, db, "wide", sleepPlugin, 8, "fifo", bson.E{Key: "requested_resources", Value: bson.D{{Key: "cpus", Value: 3}}})
	ids := dentest.Tasks(t, db, q, sleepTasks(5, 1500)...)
	big1, big2, small, huge, bad := ids[0], ids[1], ids[2], ids[3], ids[4]
	request := func(id bson.ObjectID, r any) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "requested_resources", Value: r}}}})
	}
	request(big1, bson.D{{Key: "memory_mb", Value: 600}})
	request(big2, bson.D{{Key: "memory_mb", Value: 600}, {Key: "cpus", Value: 1}})
	request(huge, bson.D{{Key: "memory_mb", Value: 5000}})
	request(bad, bson.D{{Key: "memory_mb", Value: "lots"}})
	w := dentest.Tasks(t, db, wide, sleepTasks(2, 1500)...)
	startNode(t, db, "n", func(c *den.Config) {
		c.Resources = den.ResourceLimits{MemoryMB: 1000, CPUs: 4, BusyCorePercent: 100}
	})

	span := func(id bson.ObjectID) (time.Time, time.Time) {
		raw := dentest.WaitStatus(t, db, id, 1)
		return raw.Lookup("runner", "at").Time(), raw.Lookup("mtime").Time()
	}
	overlap := func(a, b bson.ObjectID) bool {
		as, ae := span(a)
		bs, be := span(b)
		return as.Before(be) && bs.Before(ae)
	}
	if overlap(big1, big2) {
		t.Error("the two 600 MiB tasks ran at the same time on a node with 1000 MiB")
	}
	if !overlap(big1, small) && !overlap(big2, small) {
		t.Error("the task without a request did not run beside a 600 MiB one")
	}
	if overlap(w[0], w[1]) {
		t.Error("two tasks of a queue requesting 3 cores ran at once on a node with 4")
	}
	if st := status(t, db, huge); st != -2 {
		t.Errorf("a task requesting 5000 MiB of a 1000 MiB node has status %d, want -2 (waiting)", st)
	}
	raw := dentest.WaitStatus(t, db, bad, 2)
	if !strings.Contains(raw.Lookup("stderr").StringValue(), "requested_resources memory_mb is") {
		t.Errorf("bad request: stderr %s", raw.Lookup("stderr"))
	}
}

// When several queues have work, the largest request that fits goes first:
// on a node with 1000 MiB, a queue requesting 800 MiB is
// claimed from before an older queue requesting 300 MiB, whatever the two
// queues' sort orders, and the small tasks wait while a big one runs (300
// MiB no longer fit). Claim order within each queue stays its sort order.
func TestLargestRequestFirst(t *testing.T) {
	t.Parallel()
	for _, bigSort := range []string{"fifo", "lifo"} {
		t.Run("big="+bigSort, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			mb := func(n int) bson.E {
				return bson.E{Key: "requested_resources", Value: bson.D{{Key: "memory_mb", Value: n}}}
			}
			small := dentest.Queue(t, db, "small", sleepPlugin, 4, "fifo", mb(300))
			big := dentest.Queue(t, db, "big", sleepPlugin, 4, bigSort, mb(800))
			smalls := dentest.Tasks(t, db, small, sleepTasks(2, 300)...) // older than the big ones
			bigs := dentest.Tasks(t, db, big, sleepTasks(2, 300)...)
			var mu sync.Mutex
			var order []bson.ObjectID
			startNode(t, db, "n", func(c *den.Config) {
				c.Resources = den.ResourceLimits{MemoryMB: 1000, CPUs: 4, BusyCorePercent: 100}
				c.BeforeHandOver = func(_ context.Context, id bson.ObjectID) {
					mu.Lock()
					defer mu.Unlock()
					order = append(order, id)
				}
			})
			for _, id := range append(smalls, bigs...) {
				dentest.WaitStatus(t, db, id, 1)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []bson.ObjectID{bigs[0], bigs[1], smalls[0], smalls[1]}
			if bigSort == "lifo" {
				want[0], want[1] = bigs[1], bigs[0]
			}
			if !slices.Equal(order, want) {
				t.Errorf("claim order %v, want %v (big %v, small %v)", order, want, bigs, smalls)
			}
		})
	}
}

// A task whose request (its own, or its queue's) is more than any live den
// node offers gets a reason in its unfit field from the sweep, logged once
// for its queue; once a node offering enough joins, or the request is
// lowered, the reason goes (logged once) and the task runs.
func TestUnfitRequestSaysWhy(t *testing.T) {
	t.Parallel()
	// A node offers no more memory than is available: the bigger nodes
	// below offer 8000 MiB only on a machine with that much free.
	if vm, err := hostmem.VirtualMemory(); err != nil || vm.Available < 8000<<20 {
		t.Skipf("needs 8000 MiB of available memory for the bigger node's offer (err %v)", err)
	}
	request := func(r bson.D) bson.E { return bson.E{Key: "requested_resources", Value: r} }
	mem := func(n int) bson.D { return bson.D{{Key: "memory_mb", Value: n}} }
	cpus := func(n int) bson.D { return bson.D{{Key: "cpus", Value: n}} }
	for _, c := range []unfitCase{
		{"a bigger node joins", nil, mem(5000), "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus",
			func(t *testing.T, db *mongo.Database, _, _ bson.ObjectID) {
				startNode(t, db, "big", func(c *den.Config) {
					c.Resources = den.ResourceLimits{MemoryMB: 8000, CPUs: 4, BusyCorePercent: 100}
				})
			}},
		// The offer alone clears the note: this node serves no queue, so
		// it claims nothing (the claim removes a note too); the task is
		// then run by the small node once its request is lowered.
		{"a bigger node that serves no queue joins", nil, mem(5000), "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus",
			func(t *testing.T, db *mongo.Database, _, task bson.ObjectID) {
				startNode(t, db, "bystander", func(c *den.Config) {
					c.Resources = den.ResourceLimits{MemoryMB: 8000, CPUs: 4, BusyCorePercent: 100}
					c.IgnoreQueues = []string{"q"}
				})
				dentest.Eventually(t, 2*time.Minute, "the note removed for the bystander's offer", func() bool {
					s, _ := dentest.Task(t, db, task).Lookup("unfit").StringValueOK()
					return s == ""
				})
				if st := status(t, db, task); st != -2 {
					t.Errorf("status %d, want -2: nobody can run it yet", st)
				}
				dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: task}}, bson.D{{Key: "$set", Value: bson.D{request(mem(500))}}})
			}},
		{"the task's request is lowered", nil, mem(5000), "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus",
			func(t *testing.T, db *mongo.Database, _, task bson.ObjectID) {
				dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: task}}, bson.D{{Key: "$set", Value: bson.D{request(mem(500))}}})
			}},
		{"a request written as a string", nil, bson.D{{Key: "memory_mb", Value: "5000"}}, "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus",
			func(t *testing.T, db *mongo.Database, _, task bson.ObjectID) {
				// The sweep rewrote it as the number it means.
				if v := dentest.Task(t, db, task).Lookup("requested_resources", "memory_mb"); v.Type != bson.TypeDouble || v.Double() != 5000 {
					t.Errorf("requested_resources.memory_mb %s, want 5000 as a number", v)
				}
				dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: task}}, bson.D{{Key: "$set", Value: bson.D{request(mem(500))}}})
			}},
		{"the queue's request is lowered", cpus(64), nil, "requests 64 cpus; the largest live den node offers 1000 MiB, 4 cpus",
			func(t *testing.T, db *mongo.Database, q, _ bson.ObjectID) {
				dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: q}}, bson.D{{Key: "$set", Value: bson.D{request(cpus(2))}}})
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkUnfit(t, c)
		})
	}
}

// unfitCase is a task that requests more than the node offers, and how it
// comes to fit.
type unfitCase struct {
	name       string
	queueReq   bson.D // the queue's request (nil: none)
	taskReq    bson.D // the task's own (nil: none)
	wantReason string
	// fix makes the task fit: a node joins, or a request is lowered.
	fix func(t *testing.T, db *mongo.Database, q, task bson.ObjectID)
}

// checkUnfit runs case c on a small node: the task waits with c's reason
// in its unfit field, logged once, until c.fix makes it fit; then it runs
// and the note goes, its clearing logged once.
func checkUnfit(t *testing.T, c unfitCase) {
	request := func(r bson.D) bson.E { return bson.E{Key: "requested_resources", Value: r} }
	db := dentest.DB(t)
	var extra []bson.E
	if c.queueReq != nil {
		extra = append(extra, request(c.queueReq))
	}
	q := dentest.Queue(t, db, "q", sleepPlugin, 4, "fifo", extra...)
	task := dentest.Tasks(t, db, q, sleepTasks(1, 10)...)[0]
	if c.taskReq != nil {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: task}}, bson.D{{Key: "$set", Value: bson.D{request(c.taskReq)}}})
	}
	small := startNode(t, db, "small", func(c *den.Config) {
		c.Resources = den.ResourceLimits{MemoryMB: 1000, CPUs: 4, BusyCorePercent: 100}
	})
	unfit := func() string {
		s, _ := dentest.Task(t, db, task).Lookup("unfit").StringValueOK()
		return s
	}
	dentest.Eventually(t, time.Minute, "an unfit reason on the task", func() bool { return unfit() != "" })
	if got := unfit(); got != c.wantReason {
		t.Errorf("unfit %q, want %q", got, c.wantReason)
	}
	// Several sweeps later: still waiting, still one warning.
	logged := func(msg string) int { return small.Logs.FilterMessageSnippet(msg).Len() }
	// The node's heartbeat a second of its time on: five sweeps more.
	beat := func() time.Time {
		raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "small"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw.Lookup("timestamp").Time()
	}
	marked := beat()
	dentest.Eventually(t, time.Minute, "five more sweeps", func() bool { return beat().Sub(marked) > time.Second })
	if st := status(t, db, task); st != -2 {
		t.Fatalf("status %d, want -2 (waiting)", st)
	}
	if n := logged("request more than any live den node offers"); n != 1 {
		t.Errorf("the wait was logged %d times, want once", n)
	}
	c.fix(t, db, q, task)
	dentest.WaitStatus(t, db, task, 1)
	dentest.Eventually(t, time.Minute, "the unfit reason removed", func() bool { return unfit() == "" })
	dentest.Eventually(t, time.Minute, "the clearing logged", func() bool { return logged("no queued task of the queue") == 1 })
}
