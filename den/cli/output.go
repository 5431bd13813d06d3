package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

// followEvery is how often den output --follow reads the task again.
const followEvery = time.Second

func newOutputCmd() *cobra.Command {
	var stderr, follow, raw bool
	var attempt int
	cmd := &cobra.Command{
		Use:   "output TASK_ID",
		Short: "Print a task's stdout (or --stderr), from the task document or GridFS",
		Long: `Print a task's stdout, or its stderr with --stderr: from the task
document, or streamed from Disbatch's GridFS (tasks.files and tasks.chunks)
when the output is a file id. Uses the same configuration as den run
(--config, DEN_MONGO_URI, --mongo-uri, ...).

Control characters are printed escaped, so that a task's program cannot
act on the terminal (clear it, retitle it, move the cursor): newlines,
tabs and "\r\n" as they are, other C0 controls, DEL, C1 controls,
bidirectional formatting characters and bytes that are not UTF-8 as Go
escapes (\x1b, \u009b, \u202e, \xff). With --raw, the exact bytes stored
are printed (for a file or a pipe: den output ID --raw > out.bin).

With --follow, den prints the output as the task writes it, until the
task has ended (finished, cancelled or orphaned). It asks the node running
the task for live output (setting the task's live_until, renewed every 10
seconds while it follows); the node passes the request to the task's
runner, which then publishes what the task wrote into the task's live
field about once a second (the last 256 KiB of each stream), and stops
when nobody has asked for 15 seconds. A task nobody follows costs nothing.
When the run ends, --follow goes on from the stored output. A task run by
a Perl Disbatch node has no live output: its output is printed when it
ends. A retried run's output is printed from its start; what happens to
the task is said on stderr. Without --follow, a task that has no output
yet is an error.

With --attempt N, den prints the output of the task's Nth run: its runs
are those in its history (each retried run, whether den or an operator
retried it), oldest first, then the current one. den task show lists
them.`,
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
			if attempt < 0 {
				return usagef("--attempt counts runs from 1")
			}
			var w io.Writer = cmd.OutOrStdout()
			var tw *human.TextWriter
			if !raw {
				tw = human.NewTextWriter(w)
				w = tw
			}
			if attempt > 0 {
				err = writeAttempt(cmd, d, id, field, attempt, follow, w)
			} else {
				err = writeOutput(cmd, d, id, field, follow, w)
			}
			if tw == nil {
				return err
			}
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print the output as the task writes it, until it ends")
	cmd.Flags().BoolVar(&raw, "raw", false, "print the output's exact bytes, control characters included (default: escaped)")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "print the output of the task's Nth run (1: its first; default: the current or last run)")
	addDBFlags(cmd.Flags())
	return cmd
}

// writeOutput prints a task's output stream to w, following it with follow.
func writeOutput(cmd *cobra.Command, d *database, id bson.ObjectID, field string, follow bool, w io.Writer) error {
	if follow {
		return followOutput(cmd.Context(), d, id, field, w, cmd.ErrOrStderr())
	}
	_, err := printOutput(cmd.Context(), d, id, field, w, 0, false)
	return err
}

// readTask reads a task from tasks, else from tasks_archive (archived is
// then true); nil when it is in neither.
func readTask(ctx context.Context, d *database, id bson.ObjectID) (t *queue.Task, archived bool, err error) {
	if t, err = d.store.Task(ctx, id); t != nil || err != nil {
		return t, false, err
	}
	t, err = d.store.ArchivedTask(ctx, id)
	return t, t != nil, err
}

// writeAttempt prints the output of a task's nth run: one of the runs in
// its history, or the current run when n is one past them.
func writeAttempt(cmd *cobra.Command, d *database, id bson.ObjectID, field string, n int, follow bool, w io.Writer) error {
	ctx := cmd.Context()
	doc, _, err := readTask(ctx, d, id)
	if err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
	}
	history, err := doc.History()
	if err != nil {
		return fmt.Errorf("task %s: %w", id.Hex(), err)
	}
	switch runs := len(history) + 1; {
	case n > runs:
		return fmt.Errorf("task %s has had %d runs; there is no run %d", id.Hex(), runs, n)
	case n == runs:
		return writeOutput(cmd, d, id, field, follow, w)
	case follow:
		return usagef("--follow follows the current run (--attempt %d); run %d has ended", runs, n)
	}
	v := history[n-1].Stdout
	if field == queue.StreamStderr {
		v = history[n-1].Stderr
	}
	switch v := v.(type) {
	case bson.ObjectID:
		found, err := printFile(ctx, d, v, w, 0)
		if err == nil && !found {
			err = fmt.Errorf("task %s, run %d: its %s file %s is gone from GridFS", id.Hex(), n, field, v.Hex())
		}
		return err
	case string:
		_, err := io.WriteString(w, v)
		return err
	}
	return fmt.Errorf("task %s, run %d: no %s was kept", id.Hex(), n, field)
}

// printOutput prints a task's output from byte offset skip on, and returns
// the task and the offset reached. With quiet, a task without output yet is
// not an error (nil task returned means no such task).
func printOutput(ctx context.Context, d *database, id bson.ObjectID, field string, w io.Writer, skip int64, quiet bool) (*queue.Task, error) {
	doc, _, err := readTask(ctx, d, id)
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
	found, err := printFile(ctx, d, file, w, skip)
	if !found && quiet {
		return doc, nil
	}
	return doc, err
}

// printFile prints a stored GridFS file from byte offset skip on; found is
// false when there is no such file (yet: a file is visible once complete).
func printFile(ctx context.Context, d *database, file bson.ObjectID, w io.Writer, skip int64) (found bool, err error) {
	r, err := gridfs.NewBucket(d.db, queue.GridFSPrefix).Open(ctx, file)
	if errors.Is(err, gridfs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	if _, err := io.CopyN(io.Discard, r, skip); err != nil && !errors.Is(err, io.EOF) {
		return true, err
	}
	_, err = io.Copy(w, r)
	return true, err
}

// followOutput prints a task's output as it is written until the task has
// ended. While the task runs on a den node, it asks for live output
// (queue.OperatorStore.SetLiveUntil, renewed while it follows) and prints what the runner
// publishes; when the run ends it goes on from the same offset in the
// stored output. Output is tracked per run (the runner's token): a retried
// run's output is printed from its start.
func followOutput(ctx context.Context, d *database, id bson.ObjectID, field string, w, errOut io.Writer) error {
	var (
		run      bson.ObjectID // the run whose output is being printed
		pos      int64         // how much of it was printed
		where    string        // where its stored output is ("text" or a file id)
		fileDone bool          // its stored file was printed
		asked    time.Time     // when live output was last asked for
		askedOK  bool          // and the task was claimed or running then
		running  time.Time     // when following saw the task running without live output
		said     string
		noLive   bool
	)
	for {
		now := time.Now()
		if !askedOK || now.Sub(asked) >= queue.LiveLease/3 {
			ok, err := d.store.SetLiveUntil(ctx, id, now.Add(queue.LiveLease))
			if err != nil {
				return err
			}
			asked, askedOK = now, ok
		}
		doc, err := d.store.Task(ctx, id)
		if err != nil {
			return err
		}
		if doc == nil {
			return fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
		}
		var token bson.ObjectID
		if doc.Runner != nil {
			token = doc.Runner.Token
		}
		if token != run {
			run, pos, where, fileDone, running = token, 0, "", false, time.Time{}
		}
		if live, ok := doc.LiveOutput(); ok {
			data, skipped := live.Stream(field).After(pos)
			if skipped > 0 {
				fmt.Fprintf(errOut, "den: %d bytes of %s were written faster than they could be followed; only the last %d KiB of a running task are kept live\n", skipped, field, queue.LiveTail>>10)
			}
			n, err := w.Write(data)
			pos += skipped + int64(n)
			if err != nil {
				return err
			}
		} else if text, file, oerr := doc.Output(field); oerr == nil {
			place := "text"
			if !file.IsZero() {
				place = file.Hex()
			}
			if where != "" && place != where {
				pos, fileDone = 0, false
			}
			where = place
			cw := &countingWriter{w: w}
			switch {
			case place == "text" && int64(len(text)) > pos:
				_, err = io.WriteString(cw, text[pos:])
			case place != "text" && !fileDone:
				// A GridFS file is complete once visible: printed once.
				fileDone, err = printFile(ctx, d, file, cw, pos)
			}
			pos += cw.n
			if err != nil {
				return err
			}
		} else if doc.Status == queue.StatusRunning && doc.StatusOK {
			if running.IsZero() {
				running = now
			} else if !noLive && now.Sub(running) > 3*queue.LiveLease/2 {
				noLive = true
				fmt.Fprintf(errOut, "den: node %s publishes no live output (a Perl Disbatch node, or a den node before live output); its output is printed when the task ends\n", human.Escape(doc.Node))
			}
		}
		if doc.StatusOK && queue.Ended(doc.Status) {
			fmt.Fprintf(errOut, "den: task %s ended: %s\n", id.Hex(), statusText(*doc))
			return nil
		}
		state := statusText(*doc)
		if doc.Node != "" {
			state += " on node " + human.Escape(doc.Node)
		}
		if state != said {
			fmt.Fprintf(errOut, "den: task %s is %s; following its output until it ends (Ctrl-C to stop)\n", id.Hex(), state)
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
