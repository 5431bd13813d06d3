package claim

import (
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/queue"
)

// The pure logic of the node's components, without a database or a
// process: the end-to-end tests show them at work, these say exactly what
// each decides.

func TestClaimGroups(t *testing.T) {
	t.Parallel()
	q := func(name, sort string, req *queue.Resources) queue.Queue {
		return queue.Queue{ID: bson.NewObjectID(), Name: name, Sort: sort, Control: queue.Control{Requested: req}}
	}
	n := &Claimer{Capacity: &Capacity{limits: ResourceLimits{MemoryMB: 1000, CPUs: 4}}}
	names := func(groups [][]queue.Queue) [][]string {
		var out [][]string
		for _, g := range groups {
			var ns []string
			for _, q := range g {
				ns = append(ns, q.Name)
			}
			out = append(out, ns)
		}
		return out
	}
	small, big := &queue.Resources{MemoryMB: 100}, &queue.Resources{CPUs: 3} // 10 % of memory, 75 % of cores
	for _, tc := range []struct {
		name string
		work []queue.Queue
		want [][]string
	}{
		{"one group per sort order, fifo then lifo then default", []queue.Queue{q("d", "", nil), q("l", queue.SortLIFO, nil), q("f1", queue.SortFIFO, nil), q("f2", queue.SortFIFO, nil)},
			[][]string{{"f1", "f2"}, {"l"}, {"d"}}},
		{"the largest request first, as a share of the node; no request last", []queue.Queue{q("none", queue.SortFIFO, nil), q("small", queue.SortFIFO, small), q("big", queue.SortLIFO, big)},
			[][]string{{"big"}, {"small"}, {"none"}}},
		{"equal requests share a group", []queue.Queue{q("s1", queue.SortFIFO, small), q("s2", queue.SortFIFO, &queue.Resources{MemoryMB: 100})},
			[][]string{{"s1", "s2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(n.claimGroups(tc.work)); !slices.EqualFunc(got, tc.want, slices.Equal[[]string]) {
				t.Errorf("groups %v, want %v", got, tc.want)
			}
		})
	}
}

// What the node holds: a claim counts from the claim until its runner is
// done with it, with what it requested reserved meanwhile.
func TestHeldTasks(t *testing.T) {
	t.Parallel()
	o := held.New()
	q1, q2 := bson.NewObjectID(), bson.NewObjectID()
	a, b, c := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	o.Claimed(a, q1, queue.Resources{MemoryMB: 100})
	o.Claimed(b, q1, queue.Resources{})
	o.Claimed(c, q2, queue.Resources{MemoryMB: 50, CPUs: 1})
	by, total := o.Counts()
	if total != 3 || by[q1] != 2 || by[q2] != 1 || !o.Any() {
		t.Fatalf("counts %v, %d; want q1 2, q2 1, 3 in all", by, total)
	}
	if r := o.Reserved(); r != (queue.Resources{MemoryMB: 150, CPUs: 1}) {
		t.Errorf("reserved %+v, want 150 MiB and 1 core", r)
	}
	o.Done(a, time.Now())
	by, total = o.Counts()
	if total != 2 || by[q1] != 1 {
		t.Errorf("after a's runner is done: %v, %d; want q1 1, 2 in all", by, total)
	}
	if r := o.Reserved(); r != (queue.Resources{MemoryMB: 50, CPUs: 1}) {
		t.Errorf("reserved after a is done %+v, want 50 MiB and 1 core", r)
	}
}

func TestRequestOfAndQueueFits(t *testing.T) {
	t.Parallel()
	queueReq := &queue.Resources{MemoryMB: 200}
	withReq := queue.Queue{Control: queue.Control{Requested: queueReq}}
	own := &queue.Resources{CPUs: 2}
	if got := queue.Requested(own, withReq); got != *own {
		t.Errorf("a task's own request goes first: %+v", got)
	}
	if got := queue.Requested(nil, withReq); got != *queueReq {
		t.Errorf("a task without one inherits its queue's: %+v", got)
	}
	if got := queue.Requested(nil, queue.Queue{}); got != (queue.Resources{}) {
		t.Errorf("no request anywhere is nothing: %+v", got)
	}
	if !queueFits(queue.Queue{}, queue.Resources{}) {
		t.Error("a queue without a request always fits")
	}
	if queueFits(withReq, queue.Resources{MemoryMB: 100, CPUs: 8}) || !queueFits(withReq, queue.Resources{MemoryMB: 200}) {
		t.Error("a queue's request fits exactly what is free, no less")
	}
}

// A node claims again each time a runner ends: what it has free comes
// from one look at the machine per machineEvery, not one per claim, and
// from the look's figures.
func TestCapacityLooksAtTheMachineOncePerSecond(t *testing.T) {
	t.Parallel()
	meter := &countedMemory{total: 8000, available: 3000}
	c := &Capacity{limits: ResourceLimits{CPUs: 2, BusyCorePercent: 100}, meter: meter}
	for range 50 {
		free := c.free(queue.Resources{MemoryMB: 1000})
		if free.MemoryMB != 3000 || free.CPUs != 2 {
			t.Fatalf("free %+v, want the machine's 3000 MB available (below 8000 less 1000 reserved) and the 2 cores", free)
		}
		if total := c.total(); total.MemoryMB != 8000 {
			t.Fatalf("total %+v, want the machine's 8000 MB", total)
		}
	}
	if meter.reads != 1 {
		t.Fatalf("50 claims read the machine %d times, want once", meter.reads)
	}
	c.mu.Lock()
	c.machineAt = c.machineAt.Add(-machineEvery)
	c.mu.Unlock()
	c.free(queue.Resources{})
	if meter.reads != 2 {
		t.Fatalf("a claim a second later read the machine %d times in all, want twice", meter.reads)
	}
}

// countedMemory is a machine of fixed memory that counts its reads.
type countedMemory struct {
	total, available float64
	reads            int
}

func (m *countedMemory) memory() (float64, float64) {
	m.reads++
	return m.total, m.available
}
