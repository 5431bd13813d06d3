package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// unfitShown is how many queued tasks no node can run den status lists.
const unfitShown = 10

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One screen: queues, nodes, and the last failures",
		Long: `Print the queues (as den queue list, the deleted queues too: ids that tasks
name but no queue document has, with their tasks counted), the nodes (as den node list) and the
last 10 tasks that failed (status 2 and up) or were orphaned (-6), the
newest first (as the census found them: the counts, at most web.counts_age
old), with the last line of their stderr; and, when
there are any, the queues whose waiting tasks none starts, with why (den
task why says it of one task), and up to 10 queued tasks that request more
than any live den node offers, with why (their unfit field).`,
		Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			now := time.Now()
			l, err := queueRows(cmd, d)
			if err != nil {
				return err
			}
			queues := l.rows
			nodes, err := nodeRows(cmd, d, now)
			if err != nil {
				return err
			}
			census, err := takeCensus(cmd, d)
			if err != nil {
				return err
			}
			failures, err := d.store.TasksByID(cmd.Context(), census.Failures)
			if err != nil {
				return err
			}
			unfit, err := d.store.UnfitTasks(cmd.Context(), unfitShown)
			if err != nil {
				return err
			}
			names, err := queueNames(cmd, d)
			if err != nil {
				return err
			}
			held, err := heldQueues(cmd, d, queues, now)
			if err != nil {
				return err
			}
			type waiting struct {
				ID        string `json:"id"`
				QueueName string `json:"queue_name"`
				Unfit     string `json:"unfit"`
			}
			wr := []waiting{}
			for _, t := range unfit {
				wr = append(wr, waiting{t.ID.Hex(), names[t.Queue], t.Unfit})
			}
			type failure struct {
				taskRow
				Reason string `json:"reason"`
			}
			fr := []failure{}
			for _, t := range failures {
				f := failure{taskRow: taskRow{ID: t.ID.Hex(), Queue: t.Queue.Hex(), QueueName: names[t.Queue], StatusName: queue.StatusName(t.Status),
					Node: t.Node, Ctime: timePtr(t.Ctime), Mtime: timePtr(t.Mtime)}}
				st := t.Status
				f.Status = &st
				f.Reason = human.LastLine(t, 80, "(in GridFS: den output "+t.ID.Hex()+" --stderr)")
				fr = append(fr, f)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"database": d.cfg.Database, "queues": queues, "deleted_queues": l.deleted,
					"nodes": nodes, "recent_failures": fr, "unfit": wr, "held_queues": held})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "database %s, %s\n\nQUEUES\n", human.Escape(d.cfg.Database), stamp(now))
			if len(queues) == 0 {
				fmt.Fprintln(w, "(none: den queue create NAME --plugin PLUGIN)")
			} else {
				printQueueTable(cmd, queues)
			}
			for _, b := range l.bad {
				fmt.Fprintf(w, "queue %s cannot be used: %s\n", human.Escape(fmt.Sprint(b.ID)), human.Escape(fmt.Sprint(b.Reason)))
			}
			printDeletedQueues(cmd, l.deleted)
			fmt.Fprintln(w, "\nNODES")
			if len(nodes) == 0 {
				fmt.Fprintln(w, "(none has written a heartbeat)")
			} else {
				printNodeTable(cmd, nodes, now)
			}
			printHeldQueues(cmd, held)
			if len(wr) > 0 {
				fmt.Fprintln(w, "\nWAITING: MORE REQUESTED THAN ANY LIVE DEN NODE OFFERS")
				t := newTable(w, "ID", "QUEUE", "WHY")
				for _, r := range wr {
					t.row(r.ID, queue.ShownName(r.QueueName), r.Unfit)
				}
				t.flush()
			}
			fmt.Fprintln(w, "\nRECENT FAILURES")
			if len(fr) == 0 {
				fmt.Fprintln(w, "(none)")
				return nil
			}
			t := newTable(w, "ID", "QUEUE", "STATUS", "NODE", "CHANGED", "STDERR (LAST LINE)")
			for i, f := range failures {
				node := f.Node
				if node == "" {
					node = "-"
				}
				t.row(f.ID.Hex(), queue.ShownName(fr[i].QueueName), statusText(f), node, ago(now, f.Mtime), fr[i].Reason)
			}
			t.flush()
			return nil
		}),
	}
	addDBFlags(cmd.Flags())
	addJSONFlag(cmd.Flags())
	return cmd
}
