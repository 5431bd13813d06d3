package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den node list tells running, stopped and dead nodes apart; den node
// forget removes a stopped or dead node's document, and refuses a running
// one and one that still holds tasks.
func TestNodeLifecycle(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	now := time.Now()
	q := dentest.Queue(t, db, "a", demo.Name, 4, "fifo")
	nodeDoc(t, db, "running", now, nil)
	nodeDoc(t, db, "stopped", now.Add(-time.Hour), bson.D{{Key: "stopped", Value: now.Add(-time.Hour)}})
	nodeDoc(t, db, "dead", now.Add(-time.Hour), nil)
	nodeDoc(t, db, "dead-busy", now.Add(-time.Hour), nil)
	// A node that stopped once and runs again (its stopped is older than
	// its timestamp) is running.
	nodeDoc(t, db, "restarted", now, bson.D{{Key: "stopped", Value: now.Add(-time.Hour)}})
	busy := dentest.Tasks(t, db, q, bson.D{})[0]
	setTask(t, db, busy, bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "dead-busy"}})

	var rows []nodeRow
	denDB(t, db, "", "node", "list", "--json").must(t, ExitOK).decode(t, &rows)
	states := map[string]string{}
	for _, r := range rows {
		states[r.Name] = r.State
		if (r.Stopped != nil) != (r.Name == "stopped") {
			t.Errorf("node %s: stopped %v", r.Name, r.Stopped)
		}
	}
	want := map[string]string{"running": queue.NodeRunning, "stopped": queue.NodeStopped, "dead": queue.NodeDead, "dead-busy": queue.NodeDead, "restarted": queue.NodeRunning}
	for name, st := range want {
		if states[name] != st {
			t.Errorf("node %s is %q, want %q", name, states[name], st)
		}
	}
	table := denDB(t, db, "", "node", "list").must(t, ExitOK).stdout
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 1 && want[f[0]] != "" && f[1] != want[f[0]] {
			t.Errorf("node table says %q for %s:\n%s", f[1], f[0], table)
		}
	}

	for _, tc := range []struct {
		node string
		code int
		say  string
	}{
		{"running", ExitError, "the node is alive"},
		{"restarted", ExitError, "the node is alive"},
		{"dead-busy", ExitError, "still holds 1 claimed or running tasks"},
		{"nosuch", ExitError, "no node document"},
		{"stopped", ExitOK, "forgot node stopped (stopped)"},
		{"dead", ExitOK, "forgot node dead (dead)"},
	} {
		r := denDB(t, db, "", "node", "forget", tc.node).must(t, tc.code, "node", "forget", tc.node)
		if !strings.Contains(r.stdout+r.stderr, tc.say) {
			t.Errorf("forget %s said %q %q, want %q", tc.node, r.stdout, r.stderr, tc.say)
		}
	}
	left := map[string]bool{}
	denDB(t, db, "", "node", "list", "--json").must(t, ExitOK).decode(t, &rows)
	for _, r := range rows {
		left[r.Name] = true
	}
	if len(left) != 3 || !left["running"] || !left["restarted"] || !left["dead-busy"] {
		t.Errorf("after forgetting: %v", left)
	}
}
