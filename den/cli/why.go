package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// deadAfter is when a silent node counts as dead: the configuration's
// dead_node_after, else den's default.
func deadAfter(d *database) time.Duration {
	if d.cfg.DeadNodeAfter > 0 {
		return d.cfg.DeadNodeAfter
	}
	return queue.DefaultDeadNodeAfter
}

func newTaskWhyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "why TASK_ID",
		Short: "Say why a task has not started, from what the database holds",
		Long: `Say why a task has not started: every reason that holds it, from the task
(cancel requested, start_after in the future, waiting for other tasks,
another held status, a request no live node can meet) and from its queue
(paused, a limit of 0, no live node, no live node that serves it, full on
every node that serves it); with none, how many of its queue's tasks are
taken before it. A claimed, running or ended task is not waiting, and says
so. A node is live when it wrote its node document within dead_node_after
and did not say it stopped. --json gives each reason's stable code:
` + whyCodes + `.`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			t, err := d.store.Task(cmd.Context(), id)
			if err != nil {
				return err
			}
			if t == nil {
				return fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
			}
			facts, err := d.store.ReadFacts(cmd.Context(), time.Now(), deadAfter(d))
			if err != nil {
				return err
			}
			reasons, err := d.store.Why(cmd.Context(), facts, *t)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": id.Hex(), "status": t.Status, "status_name": queue.StatusName(t.Status),
					"code": reasons[0].Code, "reason": reasons[0].Text, "reasons": reasons})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "task %s: %s\n", id.Hex(), statusText(*t))
			for _, r := range reasons {
				fmt.Fprintf(w, "  %s: %s\n", r.Code, human.Escape(r.Text))
			}
			return nil
		}),
	}
}

// whyCodes lists the reason codes, for the help text.
const whyCodes = queue.WhyMalformed + ", " + queue.WhyCancelRequested + ", " + queue.WhyDependencies + ", " + queue.WhyHeld + ", " +
	queue.WhyStartAfter + ", " + queue.WhyExpired + ", " + queue.WhyUnfit + ", " + queue.WhyNoQueue + ", " + queue.WhyQueueUnusable + ", " +
	queue.WhyPaused + ", " + queue.WhyMaxThreadsZero + ", " + queue.WhyNoLiveNode + ", " + queue.WhyNoNodeServes + ", " + queue.WhyFull + ", " +
	queue.WhyRateLimit + ", " + queue.WhyReady + "; and, for a task not waiting, " + queue.WhyClaimed + ", " + queue.WhyRunning + ", " + queue.WhyEnded

// whyLine is the first reason a waiting task has not started, for den
// task show; "" for a task that is not waiting.
func whyLine(cmd *cobra.Command, d *database, t queue.Task) (queue.Reason, error) {
	if !t.StatusOK || !(t.Status == queue.StatusQueued || (t.Status < queue.StatusClaimed && !queue.Ended(t.Status))) {
		return queue.Reason{}, nil
	}
	facts, err := d.store.ReadFacts(cmd.Context(), time.Now(), deadAfter(d))
	if err != nil {
		return queue.Reason{}, err
	}
	reasons, err := d.store.Why(cmd.Context(), facts, t)
	if err != nil {
		return queue.Reason{}, err
	}
	return reasons[0], nil
}

// whyJSON is a reason for --json: null when there is none.
func whyJSON(r queue.Reason) *queue.Reason {
	if r.Code == "" {
		return nil
	}
	return &r
}

// heldQueue is a queue with tasks to do that no node starts, and why.
type heldQueue struct {
	Name string `json:"queue_name"`
	ID   string `json:"queue"`
	Todo int64  `json:"todo"`
	queue.Reason
}

// heldQueues are the queues with tasks to do (rows, as den queue list
// counts them) that no node starts, each with the first reason
// (queue.Facts.QueueReasons).
func heldQueues(cmd *cobra.Command, d *database, rows []queueRow, now time.Time) ([]heldQueue, error) {
	out := []heldQueue{}
	var facts *queue.Facts
	for _, r := range rows {
		if r.Todo == 0 {
			continue
		}
		if facts == nil {
			var err error
			if facts, err = d.store.ReadFacts(cmd.Context(), now, deadAfter(d)); err != nil {
				return nil, err
			}
		}
		id, _ := bson.ObjectIDFromHex(r.ID)
		if q, ok := facts.Queues[id]; ok {
			if reasons := facts.QueueReasons(q); len(reasons) > 0 {
				out = append(out, heldQueue{Name: r.Name, ID: r.ID, Todo: r.Todo, Reason: reasons[0]})
			}
		}
	}
	return out, nil
}

func printHeldQueues(cmd *cobra.Command, held []heldQueue) {
	if len(held) == 0 {
		return
	}
	w := cmd.OutOrStdout()
	fmt.Fprintln(w, "\nWHY QUEUED TASKS WAIT (den task why ID says it of one task)")
	t := newTable(w, "QUEUE", "TODO", "CODE", "WHY")
	for _, h := range held {
		t.row(queue.ShownName(h.Name), itoa(h.Todo), h.Code, h.Text)
	}
	t.flush()
}
