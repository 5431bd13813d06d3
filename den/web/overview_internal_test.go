package web

import (
	"math"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// The overview's decisions, as pure functions: the limit a queue's row
// shows, why no node serves it, and a node's maxthreads.
func TestOverviewDecisions(t *testing.T) {
	t.Parallel()
	doc, _ := bson.Marshal(bson.D{{Key: "maxthreads", Value: int32(4)}})
	four := bson.Raw(doc).Lookup("maxthreads")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name          string
		q             queue.Queue
		limit, paused string
	}{
		{"per node", queue.Queue{MaxThreads: 3}, "3 per node", ""},
		{"global", queue.Queue{MaxThreads: 10, Global: true}, "10 on all nodes", ""},
		{"paused keeps the limit it resumes with", queue.Queue{MaxThreads: 0, Paused: &queue.Pause{MaxThreads: four, At: at, By: "ann"}},
			"4 per node", "paused at 2026-01-02T03:04:05Z by ann"},
		{"paused with none", queue.Queue{Global: true, Paused: &queue.Pause{}}, "none", "paused"},
	} {
		limit, paused := queueLimit(c.q)
		if limit != c.limit || paused != c.paused {
			t.Errorf("%s: queueLimit = %q, %q; want %q, %q", c.name, limit, paused, c.limit, c.paused)
		}
	}

	for _, c := range []struct {
		name    string
		reasons []queue.Reason
		want    string
	}{
		{"none", nil, ""},
		{"paused is not unserved", []queue.Reason{{Code: queue.WhyPaused, Text: "p"}}, ""},
		{"no live node", []queue.Reason{{Code: queue.WhyNoLiveNode, Text: "dead"}}, "dead"},
		{"the last that says so", []queue.Reason{{Code: queue.WhyNoLiveNode, Text: "a"}, {Code: queue.WhyPaused, Text: "p"}, {Code: queue.WhyNoNodeServes, Text: "b"}}, "b"},
	} {
		if got := unservedText(c.reasons); got != c.want {
			t.Errorf("%s: unservedText = %q, want %q", c.name, got, c.want)
		}
	}

	five := 5
	for _, c := range []struct {
		name        string
		max         *int
		problem     string
		shown, form string
	}{
		{"unset", nil, "", "none", ""},
		{"set", &five, "", "5", "5"},
		{"invalid", nil, "not a number", "invalid (0)", ""},
	} {
		shown, form := nodeLimit(c.max, c.problem)
		if shown != c.shown || form != c.form {
			t.Errorf("%s: nodeLimit = %q, %q; want %q, %q", c.name, shown, form, c.shown, c.form)
		}
	}
}

// The charts show the busiest queues first, by name among equals, and
// say how many they left out; a gap counts nothing.
func TestBusiestQueues(t *testing.T) {
	t.Parallel()
	a, b, c := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	qs := []queue.Queue{{ID: a, Name: "a"}, {ID: b, Name: "b"}, {ID: c, Name: "c"}}
	busy := newQueueSeries(3)
	busy.ok[0], busy.todo[1] = 2, 1
	gap := newQueueSeries(3) // its last backlog step is a gap
	gap.bad[2] = 1
	for _, tc := range []struct {
		name    string
		byQueue map[bson.ObjectID]*queueSeries
		shown   int
		want    string
		left    int
	}{
		{"no stats: by name", nil, 5, "abc", 0},
		{"busiest first", map[bson.ObjectID]*queueSeries{c: busy, b: gap}, 5, "cba", 0},
		{"equals by name", map[bson.ObjectID]*queueSeries{c: gap, b: gap}, 5, "bca", 0},
		{"left out", map[bson.ObjectID]*queueSeries{c: busy}, 2, "ca", 1},
	} {
		got, left := busiestQueues(qs, tc.byQueue, tc.shown)
		names := ""
		for _, q := range got {
			names += q.Name
		}
		if names != tc.want || left != tc.left {
			t.Errorf("%s: busiestQueues = %s, %d left out; want %s, %d", tc.name, names, left, tc.want, tc.left)
		}
	}
	if qs[0].Name != "a" || qs[2].Name != "c" {
		t.Errorf("busiestQueues changed its argument: %v", qs)
	}
	if v := newQueueSeries(2); !math.IsNaN(v.todo[1]) || v.todo[0] != 0 || v.activity() != 0 {
		t.Errorf("a new queue series: %+v, activity %v", v, v.activity())
	}
	if !math.IsNaN(newNodeSeries(1).run[0]) {
		t.Error("a node's missing sample is not a gap")
	}
}
