package den_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// claimCount counts, at the node's client, the commands of its claims:
// every findAndModify that sets status -1, those with a condition on
// priority (the steps of a claim by priority) apart, and the queries for
// which queues have priorities (an aggregate on priority).
type claimCount struct {
	mu                     sync.Mutex
	claims, byPrio, learns int
	all                    int
}

func (c *claimCount) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.all++
		cmd := e.Command.String()
		switch {
		case e.CommandName == "findAndModify" && isClaim(e.Command):
			c.claims++
			if strings.Contains(cmd, `"`+queue.FieldPriority+`"`) {
				c.byPrio++
			}
		case e.CommandName == "aggregate" && strings.Contains(cmd, `"`+queue.FieldPriority+`"`):
			c.learns++
		}
	}}
}

// isClaim reports whether a findAndModify is a claim: its update sets
// status -1 (a runner's start matches status -1 and sets 0).
func isClaim(cmd bson.Raw) bool {
	st, ok := cmd.Lookup("update", "$set", "status").AsInt64OK()
	return ok && st == queue.StatusClaimed
}

// TestPriorityCost measures what priorities cost in commands: one node
// (a pass a second, as by default; maxthreads 4) runs 60 short tasks in
// a fifo queue where no task has a priority, then in one where a third
// of them have 5, a third -5. It logs the figures (docs/performance.md
// quotes them) and checks what does not depend on timing: without
// priorities no claim names priority, and the query for which queues have
// them is made at most once a full pass.
func TestPriorityCost(t *testing.T) {
	t.Parallel()
	for _, withPrio := range []bool{false, true} {
		name := "without"
		if withPrio {
			name = "with"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const tasks = 60
			var c claimCount
			client, err := mongo.Connect(options.Client().ApplyURI(dentest.URI()).SetMonitor(c.monitor()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Disconnect(dentest.Context(t)) })
			db := dentest.DB(t)
			qid := dentest.Queue(t, db, "cost", sleepPlugin, 4, "fifo")
			for i := range tasks {
				var extra []bson.E
				if withPrio && i%3 == 1 {
					extra = append(extra, bson.E{Key: queue.FieldPriority, Value: 5})
				}
				if withPrio && i%3 == 2 {
					extra = append(extra, bson.E{Key: queue.FieldPriority, Value: -5})
				}
				dentest.TaskWith(t, db, qid, bson.D{{Key: "ms", Value: 0}, {Key: "i", Value: i}}, extra...)
			}
			started := time.Now()
			startNode(t, client.Database(db.Name()), "n", func(cfg *den.Config) { cfg.Interval = time.Second })
			dentest.Eventually(t, 2*time.Minute, "all done", func() bool { return countDone(t, db)() == tasks })
			took := time.Since(started)
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Logf("%s priorities: %d tasks in %.1fs: %d claim commands (%.2f a task), %d of them by priority, %d queries for queues with priorities, %d commands in all (%.2f a task)",
				name, tasks, took.Seconds(), c.claims, float64(c.claims)/tasks, c.byPrio, c.learns, c.all, float64(c.all)/tasks)
			if !withPrio && c.byPrio > 0 {
				t.Errorf("%d claims named priority in a queue without priorities", c.byPrio)
			}
			if withPrio && c.byPrio == 0 {
				t.Errorf("no claim went by priority in a queue with priorities")
			}
			if passes := int(took/time.Second) + 2; c.learns > passes {
				t.Errorf("%d queries for queues with priorities in %v: more than one a full pass", c.learns, took)
			}
		})
	}
}
