package den

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/held"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// The pure logic of the node's components, without a database or a
// process: the end-to-end tests show them at work, these say exactly what
// each decides.

func TestCycles(t *testing.T) {
	t.Parallel()
	a, b, c, d := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	for _, tc := range []struct {
		name  string
		edges map[bson.ObjectID][]bson.ObjectID
		want  int // cycles
		sizes []int
	}{
		{"none", map[bson.ObjectID][]bson.ObjectID{a: {b}, b: {c}}, 0, nil},
		{"diamond, no cycle", map[bson.ObjectID][]bson.ObjectID{a: {b, c}, b: {d}, c: {d}}, 0, nil},
		{"two tasks after each other", map[bson.ObjectID][]bson.ObjectID{a: {b}, b: {a}}, 1, []int{3}},
		{"three in a ring", map[bson.ObjectID][]bson.ObjectID{a: {b}, b: {c}, c: {a}}, 1, []int{4}},
		{"two rings", map[bson.ObjectID][]bson.ObjectID{a: {b}, b: {a}, c: {d}, d: {c}}, 2, []int{3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cycles(tc.edges)
			if len(got) != tc.want {
				t.Fatalf("%d cycles, want %d: %v", len(got), tc.want, got)
			}
			for i, cyc := range got {
				if cyc[0] != cyc[len(cyc)-1] {
					t.Errorf("cycle %d does not close: %v", i, cyc)
				}
				if !slices.Contains(tc.sizes, len(cyc)) {
					t.Errorf("cycle %d has %d ids (first repeated last), want one of %v", i, len(cyc), tc.sizes)
				}
			}
		})
	}
}

func TestClaimGroups(t *testing.T) {
	t.Parallel()
	q := func(name, sort string, req *queue.Resources) queue.Queue {
		return queue.Queue{ID: bson.NewObjectID(), Name: name, Sort: sort, Control: queue.Control{Requested: req}}
	}
	n := &claimer{capacity: &capacity{limits: ResourceLimits{MemoryMB: 1000, CPUs: 4}}}
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

// The node document lists, past NodeQueuesMax queues, those the node holds
// tasks of, then those with work, then the first by name, each group by
// name; below it, every served queue and every queue held, in the order
// read; and it counts what it left out. Its pick (a heap, not a sort of
// every queue) is checked against sorting them all.
func TestNodeDocumentEntries(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, NodeQueuesMax, NodeQueuesMax + 1, 3000} {
		queues := make([]queue.Queue, n+20)
		held := held.New()
		for i := range queues {
			todo := int64(0)
			if i%97 == 0 {
				todo = 3
			}
			// Names in no order, some the same.
			queues[i] = queue.Queue{ID: bson.NewObjectID(), Name: fmt.Sprintf("q-%05d", (i*7919)%(n/2+1)), CountTodo: &todo}
			if i%211 == 0 {
				held.Claimed(bson.NewObjectID(), queues[i].ID, queue.Resources{})
			}
		}
		// The first n are served; the 20 after them are held or not.
		held.Claimed(bson.NewObjectID(), queues[n+3].ID, queue.Resources{})
		h := &heartbeat{held: held, others: noOthers{}}
		got := h.entries(queues, queues[:n])

		holds, _ := held.Counts()
		type ranked struct {
			e    queue.NodeQueue
			rank int
		}
		var all []ranked
		for i, q := range queues {
			if i >= n && holds[q.ID] == 0 {
				continue
			}
			e := queue.NewNodeQueue(q, holds[q.ID])
			r := 2
			switch {
			case holds[q.ID] > 0:
				r = 0
			case e.TasksTodo > 0 || e.TasksDoing > 0:
				r = 1
			}
			all = append(all, ranked{e, r})
		}
		want := make([]queue.NodeQueue, 0, len(all))
		left := 0
		if len(all) > NodeQueuesMax {
			slices.SortStableFunc(all, func(a, b ranked) int {
				if c := a.rank - b.rank; c != 0 {
					return c
				}
				return strings.Compare(a.e.Name, b.e.Name)
			})
			left = len(all) - NodeQueuesMax
			all = all[:NodeQueuesMax]
		}
		for _, r := range all {
			want = append(want, r.e)
		}
		// Among equal names the order may differ: compare names, and the
		// set of queues.
		names := func(es []queue.NodeQueue) []string {
			out := make([]string, len(es))
			for i, e := range es {
				out[i] = e.Name
			}
			return out
		}
		if !slices.Equal(names(got), names(want)) || h.leftOut != left {
			t.Errorf("%d queues: listed %d (%d left out), want %d (%d left out)\n got %v\nwant %v", n, len(got), h.leftOut, len(want), left, names(got), names(want))
		}
	}
}

// A node claims again each time a runner ends: what it has free comes
// from one look at the machine per machineEvery, not one per claim, and
// from the look's figures.
func TestCapacityLooksAtTheMachineOncePerSecond(t *testing.T) {
	t.Parallel()
	meter := &countedMemory{total: 8000, available: 3000}
	c := &capacity{limits: ResourceLimits{CPUs: 2, BusyCorePercent: 100}, meter: meter}
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

// noOthers is a count in which no other node holds anything.
type noOthers struct{}

func (noOthers) othersRunning(bson.ObjectID) int { return 0 }
