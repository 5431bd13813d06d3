package sweep

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Why a blocked task can never be released, by its own fields alone.
func TestBlockedProblem(t *testing.T) {
	t.Parallel()
	self, a, b := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	for _, c := range []struct {
		name    string
		blocked queue.Blocked
		want    string
	}{
		{"fine", queue.Blocked{ID: self, After: []bson.ObjectID{a, b}}, ""},
		{"registered, unchanged", queue.Blocked{ID: self, After: []bson.ObjectID{a, b}, Registered: true, AfterWas: []bson.ObjectID{b, a}}, ""},
		{"a problem decoding it", queue.Blocked{ID: self, Problem: "after is not an array", After: []bson.ObjectID{a}}, "after is not an array"},
		{"empty", queue.Blocked{ID: self}, "after is empty; list the ids of the tasks it comes after"},
		{"itself", queue.Blocked{ID: self, After: []bson.ObjectID{a, self}}, "after names the task itself"},
		{"changed once registered", queue.Blocked{ID: self, After: []bson.ObjectID{a}, Registered: true, AfterWas: []bson.ObjectID{b}},
			"after was changed to " + hexes([]bson.ObjectID{a}) + " after den registered it as " + hexes([]bson.ObjectID{b}) + "; dependencies can only be given when a task is created"},
	} {
		if got := blockedProblem(c.blocked); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The tasks a blocked task comes after, sorted by what became of them.
func TestSortAfter(t *testing.T) {
	t.Parallel()
	ok, bad, run, gone := bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID(), bson.NewObjectID()
	statuses := map[bson.ObjectID]int{ok: queue.StatusSucceeded, bad: queue.StatusFailed, run: queue.StatusRunning}
	for _, c := range []struct {
		name  string
		after []bson.ObjectID
		want  afterStates
	}{
		{"all succeeded", []bson.ObjectID{ok}, afterStates{ended: []queue.EndedTask{{ID: ok, Status: queue.StatusSucceeded}}}},
		{"one still running", []bson.ObjectID{run, ok}, afterStates{waiting: []bson.ObjectID{run}, ended: []queue.EndedTask{{ID: ok, Status: queue.StatusSucceeded}}}},
		{"one failed", []bson.ObjectID{ok, bad, run}, afterStates{waiting: []bson.ObjectID{run}, endedBadly: true,
			ended: []queue.EndedTask{{ID: ok, Status: queue.StatusSucceeded}, {ID: bad, Status: queue.StatusFailed}}}},
		{"one missing", []bson.ObjectID{gone, run}, afterStates{missing: []bson.ObjectID{gone}, waiting: []bson.ObjectID{run}}},
	} {
		got := sortAfter(c.after, statuses)
		if !slices.Equal(got.missing, c.want.missing) || !slices.Equal(got.waiting, c.want.waiting) ||
			!slices.Equal(got.ended, c.want.ended) || got.endedBadly != c.want.endedBadly {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Cycles among blocked tasks' dependencies, each closed (its first id
// repeated last).
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
