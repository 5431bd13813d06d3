package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

// followEvery is how often den output --follow reads the task again.
const followEvery = time.Second

func newOutputCmd() *cobra.Command {
	var stderr, follow bool
	cmd := &cobra.Command{
		Use:   "output TASK_ID",
		Short: "Print a task's stdout (or --stderr), from the task document or GridFS",
		Long: `Print a task's stdout, or its stderr with --stderr, exactly as stored: from
the task document, or streamed from Disbatch's GridFS (tasks.files and
tasks.chunks) when the output is a file id. Uses the same configuration as
den run (--config, DEN_MONGO_URI, --mongo-uri, ...).

With --follow, den reads the task every second until it has ended
(finished, cancelled or orphaned), printing output as it is stored: what is
new in the task document's field, or in the GridFS file it names. den's
task runner stores a run's output when the run ends (it keeps it in memory,
or in a GridFS file that becomes visible when it is closed), so for a
running task --follow waits and prints the output when the run ends; it
says on stderr what it is waiting for. Without --follow, a task that has no
output yet is an error.`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			field := queue.StreamStdout
			if stderr {
				field = queue.StreamStderr
			}
			if follow {
				return followOutput(cmd.Context(), d, id, field, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			_, err = printOutput(cmd.Context(), d, id, field, cmd.OutOrStdout(), 0, false)
			return err
		}),
	}
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "wait for the task to end, printing output as it is stored")
	addDBFlags(cmd.Flags())
	return cmd
}

// printOutput prints a task's output from byte offset skip on, and returns
// the task and the offset reached. With quiet, a task without output yet is
// not an error (nil task returned means no such task).
func printOutput(ctx context.Context, d *database, id bson.ObjectID, field string, w io.Writer, skip int64, quiet bool) (*queue.Task, error) {
	doc, err := d.store.Task(ctx, id)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
	}
	text, file, err := doc.Output(field)
	switch {
	case errors.Is(err, queue.ErrNoOutput):
		if quiet {
			return doc, nil
		}
		return doc, fmt.Errorf("task %s has no %s yet (status %d, %s)", id.Hex(), field, doc.Status, queue.StatusName(doc.Status))
	case err != nil:
		return doc, fmt.Errorf("task %s: %w", id.Hex(), err)
	case file.IsZero():
		if int64(len(text)) > skip {
			_, err = io.WriteString(w, text[skip:])
		}
		return doc, err
	}
	r, err := gridfs.NewBucket(d.db, queue.GridFSPrefix).Open(ctx, file)
	if errors.Is(err, gridfs.ErrNotFound) && quiet {
		return doc, nil
	}
	if err != nil {
		return doc, err
	}
	defer r.Close()
	if _, err := io.CopyN(io.Discard, r, skip); err != nil && !errors.Is(err, io.EOF) {
		return doc, err
	}
	_, err = io.Copy(w, r)
	return doc, err
}

// followOutput prints a task's output as it is stored until the task has
// ended. Output is tracked by where it is (the field's text, or a file
// id) and how much of it was printed, so a retried run's new output is
// printed from its start.
func followOutput(ctx context.Context, d *database, id bson.ObjectID, field string, w, errOut io.Writer) error {
	var where string
	var printed int64
	said := ""
	for {
		cw := &countingWriter{w: w}
		doc, err := d.store.Task(ctx, id)
		if err != nil {
			return err
		}
		if doc == nil {
			return fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
		}
		text, file, oerr := doc.Output(field)
		place := "text"
		if !file.IsZero() {
			place = file.Hex()
		}
		if oerr == nil && place != where {
			where, printed = place, 0
		}
		// A GridFS file is complete once visible: printed once.
		if oerr == nil && ((place != "text" && printed == 0) || int64(len(text)) > printed) {
			if _, err := printOutput(ctx, d, id, field, cw, printed, true); err != nil {
				return err
			}
			printed += cw.n
		}
		if doc.StatusOK && queue.Ended(doc.Status) {
			fmt.Fprintf(errOut, "den: task %s ended: %s\n", id.Hex(), statusText(*doc))
			return nil
		}
		state := statusText(*doc)
		if doc.Node != "" {
			state += " on node " + doc.Node
		}
		if state != said {
			fmt.Fprintf(errOut, "den: task %s is %s; waiting for it to end (Ctrl-C to stop)\n", id.Hex(), state)
			said = state
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followEvery):
		}
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
