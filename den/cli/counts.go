package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/den-project/den/queue"
)

func newCountsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "counts",
		Short: "Check or fix the queues' count_todo and count_total against their tasks",
		Long: `Nodes and writers keep each queue's count_todo (tasks with status 0 or
less) and count_total (all its tasks) by increments; tasks inserted or
deleted by hand without them make the counts drift. check recounts them
from the tasks (one aggregation) and reports the queues that differ; fix
writes the recounted values.`,
	}
	cmd.AddCommand(newCountsCheckCmd(), newCountsFixCmd())
	for _, c := range cmd.Commands() {
		addDBFlags(c.Flags())
		addJSONFlag(c.Flags())
	}
	return cmd
}

// driftRow is one queue's counts as den counts prints them.
type driftRow struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	StoredTodo  *int64 `json:"count_todo"`
	StoredTotal *int64 `json:"count_total"`
	Todo        int64  `json:"tasks_todo"`
	Total       int64  `json:"tasks_total"`
	Drift       bool   `json:"drift"`
	Fixed       *bool  `json:"fixed,omitempty"`
}

func newDriftRow(d queue.CountDrift) driftRow {
	return driftRow{ID: d.Queue.ID.Hex(), Name: d.Queue.Name, StoredTodo: d.StoredTodo, StoredTotal: d.StoredTotal,
		Todo: d.Todo, Total: d.Total, Drift: d.Drifted()}
}

func printDrift(cmd *cobra.Command, rows []driftRow) {
	t := newTable(cmd.OutOrStdout(), "QUEUE", "ID", "COUNT_TODO", "TASKS TODO", "COUNT_TOTAL", "TASKS", "")
	for _, r := range rows {
		state := "ok"
		if r.Drift {
			state = "DRIFT"
		}
		if r.Fixed != nil {
			state = "fixed"
			if !*r.Fixed {
				state = "changed meanwhile: run again"
			}
		}
		t.row(queue.ShownName(r.Name), r.ID, countText(r.StoredTodo), itoa(r.Todo), countText(r.StoredTotal), itoa(r.Total), state)
	}
	t.flush()
}

func newCountsCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Report queues whose counts differ from their tasks (exit 1 if any)",
		Args:  cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			drifts, err := d.store.CheckCounts(cmd.Context())
			if err != nil {
				return err
			}
			rows := []driftRow{}
			bad := 0
			for _, dr := range drifts {
				r := newDriftRow(dr)
				if r.Drift {
					bad++
				}
				rows = append(rows, r)
			}
			if err := showDrift(cmd, rows); err != nil {
				return err
			}
			if bad > 0 {
				return exitError{ExitError, fmt.Errorf("counts drift in %d of %d queues; den counts fix corrects them", bad, len(rows))}
			}
			return nil
		}),
	}
}

func newCountsFixCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "fix",
		Short: "Write the counts the tasks give into the queues that drifted",
		Long: `Recount every queue's tasks and write count_todo and count_total where they
differ. Each write is conditional on the stored counts being those read: a
queue whose counts a node or writer moved meanwhile is left alone and
reported (exit 1); run den counts fix again.`,
		Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			drifts, err := d.store.CheckCounts(cmd.Context())
			if err != nil {
				return err
			}
			rows := []driftRow{}
			conflicts := 0
			for _, dr := range drifts {
				r := newDriftRow(dr)
				if r.Drift {
					ok, err := d.store.FixCounts(cmd.Context(), dr)
					if err != nil {
						return err
					}
					r.Fixed = &ok
					if !ok {
						conflicts++
					}
				}
				rows = append(rows, r)
			}
			if err := showDrift(cmd, rows); err != nil {
				return err
			}
			if conflicts > 0 {
				return exitError{ExitError, fmt.Errorf("%d queues changed while being fixed; run den counts fix again", conflicts)}
			}
			return nil
		}),
	}
}

// showDrift prints the rows as JSON with --json, else as a table.
func showDrift(cmd *cobra.Command, rows []driftRow) error {
	if wantJSON(cmd) {
		return printJSON(cmd.OutOrStdout(), rows)
	}
	printDrift(cmd, rows)
	return nil
}
