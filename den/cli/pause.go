package cli

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// operator names who acts from this command line, for a queue's paused
// mark: user@host, or what of it can be read.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return "den queue pause (" + name + ")"
}

func newQueuePauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause NAME|ID",
		Short: "Pause a queue: no node, den or Perl, starts its tasks until it is resumed",
		Long: `Pause a queue: its maxthreads and threads become 0, which every Disbatch
node honours, and the limits it had are kept in its paused field (with when
and by whom), from which den queue resume restores them exactly. Running
tasks run to their end; queued tasks wait. den runs nothing of a paused
queue whatever its limits say, and den queue set maxthreads=N on a paused
queue changes the limit it resumes with. Pausing a paused queue changes
nothing.`,
		Example: `  den queue pause resize && deploy && den queue resume resize`,
		Args:    cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			q, _, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			o, err := d.store.PauseQueue(cmd.Context(), q.ID, operator(), time.Now())
			if err != nil {
				return err
			}
			return printPaused(cmd, d, q, o == queue.PauseDone, "paused", "was already paused")
		}),
	}
}

func newQueueResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume NAME|ID",
		Short: "Resume a paused queue with the limits it had",
		Long: `Resume a queue paused with den queue pause (or the page): its maxthreads and
threads become what they were when it was paused (or what den queue set
wrote since), and its paused field is removed. Resuming a queue that is
not paused changes nothing; a maxthreads of 0 written by hand is not a
pause: change it with den queue set.`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			q, _, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			o, err := d.store.ResumeQueue(cmd.Context(), q.ID)
			if err != nil {
				return err
			}
			return printPaused(cmd, d, q, o == queue.PauseDone, "resumed", "was not paused")
		}),
	}
}

// printPaused says what den queue pause or resume did, with the queue as
// it is now.
func printPaused(cmd *cobra.Command, d *database, was queue.Queue, changed bool, did, nothing string) error {
	q, _, err := d.store.FindQueue(cmd.Context(), was.ID.Hex())
	if err != nil {
		return err
	}
	row := newQueueRow(q, queue.StatusCounts{})
	if wantJSON(cmd) {
		return printJSON(cmd.OutOrStdout(), map[string]any{"id": q.ID.Hex(), "name": q.Name, "changed": changed,
			"paused": row.Paused != nil, "limit": row.limit()})
	}
	if !changed {
		did = nothing
	}
	fmt.Fprintf(cmd.OutOrStdout(), "queue %s (%s) %s; limit: %s\n", human.Escape(queue.ShownName(q.Name)), q.ID.Hex(), did, row.limit())
	return nil
}

// pausedRow is a paused queue's mark as den queue list shows it.
type pausedRow struct {
	// Resumes is the limit it resumes with ("4 per node").
	Resumes string     `json:"resumes_with"`
	At      *time.Time `json:"at,omitempty"`
	By      string     `json:"by,omitempty"`
}

func newPausedRow(p *queue.Pause) *pausedRow {
	if p == nil {
		return nil
	}
	r := &pausedRow{Resumes: p.Limit(), By: p.By}
	if !p.At.IsZero() {
		at := p.At
		r.At = &at
	}
	return r
}

func sinceText(at *time.Time) string {
	if at == nil {
		return ""
	}
	return " since " + stamp(*at)
}

func byText(by string) string {
	if by == "" {
		return ""
	}
	return " by " + human.Escape(by)
}
