package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/den-project/den/queue"
)

// retireBatch is how many tasks den task purge and archive remove per
// batch (one find, one GridFS pass or insert, then one delete per task).
const retireBatch = 500

// retireConfirmAbove is how many tasks den task purge and archive remove
// without asking.
const retireConfirmAbove = 10

func newTaskPurgeCmd() *cobra.Command {
	return newRetireCmd(queue.RetireDelete, "purge", "Delete ended tasks and their output: by queue, status, outcome, node and age",
		`Delete ended tasks (finished, cancelled, orphaned) that match the filters,
with their output in GridFS (every run's), oldest first, in batches of 500.
Queued, claimed, running and held tasks are never deleted, nor is a task
that a task not yet ended comes after (its dependents wait for it). The
queues' count_total and count_todo follow.

--dry-run prints what would go and changes nothing. More than 10 tasks ask
for confirmation on a terminal; --yes skips it and is required when stdin
is not a terminal. Progress goes to stderr.`,
		`  den task purge --queue resize --status succeeded --older-than 720h --dry-run
  den task purge --queue resize --status succeeded --older-than 720h --yes`)
}

func newTaskArchiveCmd() *cobra.Command {
	return newRetireCmd(queue.RetireArchive, "archive", "Move ended tasks into tasks_archive: by queue, status, outcome, node and age",
		`Move ended tasks (finished, cancelled, orphaned) that match the filters
into the tasks_archive collection, unchanged (the same shape as tasks, so
mongosh and den task show read them), oldest first, in batches of 500.
Their output stays in GridFS: an archived task is kept to be read. The
same tasks are left alone as by den task purge, and the queues' counts
follow the same way.

--dry-run prints what would go and changes nothing. More than 10 tasks ask
for confirmation on a terminal; --yes skips it and is required when stdin
is not a terminal. Progress goes to stderr.`,
		`  den task archive --queue resize --older-than 168h --yes`)
}

// newRetireCmd is den task purge or den task archive.
func newRetireCmd(mode queue.RetireMode, use, short, long, example string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     use + " --queue Q|--status S|--outcome O|--node N|--older-than D|--before T [--dry-run] [--yes]",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			filtered := false
			for _, f := range []string{"queue", "status", "node", "outcome", "since", "older-than", "before"} {
				filtered = filtered || cmd.Flags().Changed(f)
			}
			if !filtered {
				return usagef("give a filter (--queue, --status, --outcome, --node, --older-than, --before): den %s takes no task without one", use)
			}
			tf, err := taskFilter(cmd, d, true)
			if err != nil {
				return err
			}
			f := queue.RetireFilter{TaskFilter: tf}
			older, _ := cmd.Flags().GetDuration("older-than")
			before, _ := cmd.Flags().GetString("before")
			switch {
			case older != 0 && before != "":
				return usagef("give --older-than or --before, not both")
			case older < 0:
				return usagef("--older-than must not be negative")
			case older > 0:
				f.EndedBefore = time.Now().Add(-older)
			case before != "":
				t, err := parseSince(before, time.Now())
				if err != nil {
					return usageError{fmt.Errorf("--before: %w", err)}
				}
				f.EndedBefore = t
			}
			dry, _ := cmd.Flags().GetBool("dry-run")
			ctx := cmd.Context()
			// The whole selection first, by id: what is confirmed is what
			// goes (tasks ending meanwhile are not added).
			var all []queue.Task
			f.Limit = retireBatch
			for {
				batch, err := d.store.RetireCandidates(ctx, f)
				if err != nil {
					return err
				}
				all = append(all, batch...)
				if len(batch) < retireBatch {
					break
				}
				// Past the last one read (ids ascend).
				f.AfterID = batch[len(batch)-1].ID
			}
			if dry {
				return printRetirePlan(cmd, use, all)
			}
			if len(all) > retireConfirmAbove {
				if err := confirm(cmd, fmt.Sprintf("%s %d tasks?", use, len(all))); err != nil {
					return err
				}
			}
			var done queue.Retired
			for i := 0; i < len(all); i += retireBatch {
				batch := all[i:min(i+retireBatch, len(all))]
				n, err := d.store.RetireTasks(ctx, batch, mode)
				done.Tasks += n.Tasks
				done.Files += n.Files
				if err != nil {
					return fmt.Errorf("after %d tasks: %w", done.Tasks, err)
				}
				if len(all) > retireBatch && !wantJSON(cmd) {
					fmt.Fprintf(cmd.ErrOrStderr(), "den: %s: %d of %d tasks\n", use, min(i+retireBatch, len(all)), len(all))
				}
			}
			left := int64(len(all)) - done.Tasks
			if wantJSON(cmd) {
				out := map[string]any{"tasks": done.Tasks, "changed_meanwhile": left}
				if mode == queue.RetireDelete {
					out["files"] = done.Files
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			w := cmd.OutOrStdout()
			switch mode {
			case queue.RetireDelete:
				fmt.Fprintf(w, "deleted %d tasks and %d GridFS files", done.Tasks, done.Files)
			default:
				fmt.Fprintf(w, "archived %d tasks into %s", done.Tasks, queue.ArchiveCollection)
			}
			if left > 0 {
				fmt.Fprintf(w, "; %d left alone (changed meanwhile)", left)
			}
			fmt.Fprintln(w)
			return nil
		}),
	}
	addTaskFilterFlags(cmd)
	cmd.Flags().Duration("older-than", 0, "only tasks that ended (mtime) longer ago than this: 720h, 30m")
	cmd.Flags().String("before", "", "only tasks that ended (mtime) before this time: 2026-11-01, 2026-11-01T00:00:00Z")
	cmd.Flags().Bool("dry-run", false, "print what would go; change nothing")
	cmd.Flags().BoolP("yes", "y", false, "do not ask for confirmation")
	return cmd
}

// printRetirePlan prints what den task purge or archive would take.
func printRetirePlan(cmd *cobra.Command, use string, tasks []queue.Task) error {
	if wantJSON(cmd) {
		ids := make([]string, 0, len(tasks))
		for _, t := range tasks {
			ids = append(ids, t.ID.Hex())
		}
		return printJSON(cmd.OutOrStdout(), map[string]any{"would": use, "tasks": ids, "count": len(tasks)})
	}
	w := cmd.OutOrStdout()
	for _, t := range tasks {
		fmt.Fprintf(w, "%s  %s  ended %s\n", t.ID.Hex(), statusText(t), stamp(t.Mtime))
	}
	fmt.Fprintf(w, "would %s %d tasks (dry run: nothing changed)\n", use, len(tasks))
	return nil
}
