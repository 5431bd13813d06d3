package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/bulk"
	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

func newTaskCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Add, list, show, cancel, retry, purge and archive tasks, and say why one waits",
	}
	cmd.AddCommand(newTaskAddCmd(), newTaskListCmd(), newTaskShowCmd(), newTaskCancelCmd(), newTaskRetryCmd(), newTaskPurgeCmd(), newTaskArchiveCmd(),
		newTaskWhyCmd())
	for _, c := range cmd.Commands() {
		addDBFlags(c.Flags())
		addJSONFlag(c.Flags())
	}
	return cmd
}

// maxLine is the longest line den task add reads: a task document is at
// most 16 MiB.
const maxLine = 16 << 20

func newTaskAddCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add QUEUE [--file F]",
		Short: "Add tasks: one line of JSON parameters per task, from a file or stdin",
		Long: `Add tasks to a queue (its name or id). Each line of --file (or of stdin
when there is no --file) is one task's parameters: a JSON object, MongoDB
extended JSON allowed ({"when": {"$date": "2026-11-23T10:00:00Z"}}).
Blank lines are skipped.

Every line is checked first: if any line is not a JSON object, den prints
each bad line's number and why, inserts nothing, and exits 1. Then the
tasks are inserted in batches of --batch, each batch in one command
followed by raising the queue's count_todo and count_total by exactly what
was inserted, so the counts stay right even if den is interrupted between
batches. A progress line is shown on stderr when it is a terminal; a
summary is printed at the end (with --json, the new tasks' ids). All lines
are held in memory while checked.

With --after, the new tasks come after the given tasks: they are inserted
blocked (status -4, which no node claims) and queued when all of those
succeeded; if one of them fails, is cancelled or orphaned, they are
cancelled with the reason (and so is whatever comes after them). A given
task that does not exist, or has already ended without succeeding, is an
error and nothing is inserted.

With --priority N the tasks get the field priority: N, and den nodes claim
them before every task of the queue with a lower priority (no field counts
as 0); within one priority, in the queue's order.

With --unique-key K (one task only), the task is inserted only if no
unfinished task of the queue holds the key K (a unique index decides, not
a read before the write); else den names the task that holds it (its id
and status), inserts nothing and exits 3 (with --json, the holder is
printed as JSON). A task holds its key until it has ended: succeeded or
failed (status 1 and up), cancelled (-5) or orphaned (-6); blocked, held
and terminated tasks still hold it. See docs/task-control.md.

With --unique (one task only), the key is made from the queue and the
task's parameters (sha256: and the SHA-256 of the queue's id and the
parameters as canonical JSON: keys in any order, 7 and 7.0 the same), so
that a task with the same parameters is not added twice while one is
unfinished. --unique-for DURATION (implies --unique unless --unique-key is
given) also keeps the key held for DURATION after the task ended: a twin
added within DURATION of its end is refused too (at most 8784h).`,
		Example: `  printf '{"commands":"ab"}\n{"commands":"a"}\n' | den task add demo
  echo '{"commands":"a"}' | den task add demo --priority 10
  den task add resize --file tasks.jsonl --config /etc/disbatch/config.json
  den task add report --after 6b02ffcf2e2e26d413036425,6b02ffcf2e2e26d413036426 < report.jsonl
  echo '{"account":"42"}' | den task add resync --unique-key account-42
  echo '{"account":"42"}' | den task add resync --unique --unique-for 1h`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			file, _ := cmd.Flags().GetString("file")
			batch, _ := cmd.Flags().GetInt("batch")
			if batch < 1 || batch > 100000 {
				return usagef("--batch %d: want 1 to 100000", batch)
			}
			q, problem, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if problem != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "den: note: queue %s has a problem nodes will skip it for: %s\n", human.Escape(queue.ShownName(q.Name)), human.Escape(problem.Error()))
			}
			in := cmd.InOrStdin()
			name := "stdin"
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("task file: %w", err)
				}
				defer f.Close()
				in, name = f, file
			}
			params, err := readParams(in, name)
			if err != nil {
				return err
			}
			opts, err := afterOptions(cmd, d)
			if err != nil {
				return err
			}
			opts.Priority, _ = cmd.Flags().GetInt64("priority")
			opts.Params = q.ParamsField() == queue.FieldParams
			if opts.UniqueKey, opts.UniqueFor, err = uniqueFlags(cmd, q.ID, params); err != nil {
				return err
			}
			progress := isTerminalWriter(cmd.ErrOrStderr()) && !wantJSON(cmd)
			done := 0
			var added []string
			for start := 0; start < len(params); start += batch {
				end := min(start+batch, len(params))
				ids, err := d.store.InsertTasks(cmd.Context(), q.ID, params[start:end], time.Now(), opts)
				n := len(ids)
				done += n
				for _, id := range ids {
					added = append(added, id.Hex())
				}
				if held := (*queue.KeyHeldError)(nil); errors.As(err, &held) {
					return keyHeld(cmd, &q, held)
				}
				if err != nil {
					if progress {
						fmt.Fprintln(cmd.ErrOrStderr())
					}
					return fmt.Errorf("inserted %d of %d tasks into queue %s (counted in count_todo/count_total); lines %d and on were not inserted: %w",
						done, len(params), queue.ShownName(q.Name), start+n+1, err)
				}
				if progress {
					fmt.Fprintf(cmd.ErrOrStderr(), "\r%s %d/%d tasks", bar(done, len(params), 30), done, len(params))
				}
			}
			if progress {
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queue": q.ID.Hex(), "name": q.Name, "inserted": done, "ids": added})
			}
			if done == 1 {
				fmt.Fprintf(cmd.OutOrStdout(), "added task %s to queue %s (%s)\n", added[0], human.Escape(queue.ShownName(q.Name)), q.ID.Hex())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "added %d tasks to queue %s (%s)\n", done, human.Escape(queue.ShownName(q.Name)), q.ID.Hex())
			}
			if len(opts.Waiting) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "waiting (status -4) for %d task(s) to succeed: %s\n", len(opts.Waiting), strings.Join(hexIDs(opts.Waiting), ", "))
			}
			return nil
		}),
	}
	cmd.Flags().StringP("file", "f", "", "file of tasks, one JSON object of parameters per line (default stdin)")
	cmd.Flags().Int("batch", 1000, "tasks per insert")
	cmd.Flags().String("unique-key", "", "insert the (one) task only if no unfinished task of the queue holds this key")
	cmd.Flags().Bool("unique", false, "insert the (one) task only if no unfinished task of the queue has the same parameters (the key is made from them)")
	cmd.Flags().Duration("unique-for", 0, "with the key (--unique, implied, or --unique-key): also refuse a twin for this long after the task ended")
	cmd.Flags().StringSlice("after", nil, "task ids the new tasks come after: they run once all of these succeeded, and are cancelled if one of them fails for good")
	cmd.Flags().Int64("priority", 0, "the tasks' priority: den nodes claim the highest first, in the queue's order within one priority (may be negative; 0 writes no field)")
	return cmd
}

// uniqueFlags reads --unique-key, --unique and --unique-for, for the
// tasks params of a queue: the key and how long it stays held after the
// task ended.
func uniqueFlags(cmd *cobra.Command, queueID bson.ObjectID, params []bson.Raw) (string, time.Duration, error) {
	key, _ := cmd.Flags().GetString("unique-key")
	byKey := cmd.Flags().Changed("unique-key")
	byParams, _ := cmd.Flags().GetBool("unique")
	hold, _ := cmd.Flags().GetDuration("unique-for")
	flag := "--unique-key"
	switch {
	case cmd.Flags().Changed("unique-for") && (hold <= 0 || hold > queue.MaxUniqueFor):
		return "", 0, usagef("--unique-for %v: want more than 0 and at most %v", hold, queue.MaxUniqueFor)
	case byKey && byParams:
		return "", 0, usagef("--unique makes the key from the parameters: give it or --unique-key, not both")
	case !byKey && (byParams || hold > 0):
		flag = "--unique"
	case !byKey:
		return "", 0, nil
	}
	if len(params) != 1 {
		return "", 0, usagef("%s is for one task, and %d were given", flag, len(params))
	}
	if !byKey {
		var err error
		if key, err = queue.ParamsKey(queueID, params[0]); err != nil {
			return "", 0, err
		}
	}
	if err := queue.CheckUniqueKey(key); err != nil {
		return "", 0, usagef("--unique-key: %v", err)
	}
	return key, hold, nil
}

// keyHeld reports a task refused for its unique key: exit status 3, and
// with --json the task that holds the key.
func keyHeld(cmd *cobra.Command, q *queue.Queue, held *queue.KeyHeldError) error {
	if wantJSON(cmd) {
		out := map[string]any{"queue": q.ID.Hex(), "name": q.Name, "inserted": 0, "unique_key": held.Key, "held_by": nil}
		if !held.Holder.IsZero() {
			by := map[string]any{"id": held.Holder.Hex(), "status": held.Status, "status_name": queue.StatusName(held.Status)}
			if !held.Until.IsZero() {
				by["held_until"] = held.Until.UTC()
			}
			out["held_by"] = by
		}
		if err := printJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	}
	return exitError{ExitHeld, fmt.Errorf("not added to queue %s: %w", human.Escape(queue.ShownName(q.Name)), held)}
}

// bar draws a progress bar of width characters.
func bar(done, total, width int) string {
	n := width
	if total > 0 {
		n = done * width / total
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// readParams reads one JSON object per line. Every bad line is reported,
// by number, in one error; then nothing is returned.
func readParams(r io.Reader, name string) ([]bson.Raw, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var out []bson.Raw
	var bad []string
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var doc bson.Raw
		if text[0] != '{' {
			bad = append(bad, fmt.Sprintf("line %d: not a JSON object", line))
		} else if err := bson.UnmarshalExtJSON(text, false, &doc); err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v", line, err))
		} else {
			out = append(out, doc)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s after line %d: %w", name, line, err)
	}
	if len(bad) > 0 {
		shown := bad
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("... and %d more", len(bad)-20))
		}
		return nil, fmt.Errorf("%s: %d of %d lines are not a task's parameters; nothing was inserted:\n  %s", name, len(bad), len(out)+len(bad), strings.Join(shown, "\n  "))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tasks (one JSON object per line)", name)
	}
	return out, nil
}

// taskRow is a task as den task list prints it.
type taskRow struct {
	ID        string `json:"id"`
	Queue     string `json:"queue"`
	QueueName string `json:"queue_name"`
	// QueueDeleted is set when no queue document has the task's queue id
	// (a deleted queue's task).
	QueueDeleted bool   `json:"queue_deleted,omitempty"`
	Status       *int   `json:"status"`
	StatusName   string `json:"status_name"`
	Node         string `json:"node"`
	Outcome      string `json:"outcome,omitempty"`
	Unfit        string `json:"unfit,omitempty"`
	// Priority is the task's priority field as stored (omitted: none, the
	// default 0).
	Priority   json.RawMessage `json:"priority,omitempty"`
	Ctime      *time.Time      `json:"ctime"`
	Mtime      *time.Time      `json:"mtime"`
	Parameters json.RawMessage `json:"parameters"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func newTaskListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first (filters: --queue, --status, --node, --outcome, --since, --param)",
		Long: `List tasks, newest first, without their output.

--param KEY=VALUE lists the tasks whose parameter KEY equals VALUE, under
either name a task carries its parameters in (parameters, the protocol's;
params, later Disbatch 4's). VALUE is read as JSON when it is a JSON
number, string or boolean, else as text: n=7 finds the number 7 (stored
as any numeric type) or the text "7", n='"7"' only the text 7, user=ann the
text ann. KEY is one field of the parameters: 1 to 64 of A-Z a-z 0-9 _
(no paths, no $).`,
		Example: `  den task list --queue demo --status failed,orphaned --since 24h
  den task list --queue resync --param account=42 --status queued
  den task list --outcome runner_died,node_died --since 24h   # infrastructure, not the task
  den task list --node worker01 --status running --json`,
		Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			f, err := taskFilter(cmd, d, true)
			if err != nil {
				return err
			}
			if p, _ := cmd.Flags().GetString("param"); p != "" {
				key, value, ok := strings.Cut(p, "=")
				if !ok || !queue.ValidParamKey(key) {
					return usagef("--param %q: want KEY=VALUE, KEY 1 to 64 of A-Z, a-z, 0-9 and _ (no dots, no $)", p)
				}
				f.ParamKey, f.ParamValue = key, queue.ParseParamValue(value)
			}
			f.Limit, _ = cmd.Flags().GetInt64("limit")
			if f.Limit < 0 {
				return usagef("--limit %d: want 0 (no limit) or more", f.Limit)
			}
			tasks, err := d.store.ListTasks(cmd.Context(), f)
			if err != nil {
				return err
			}
			names, err := queueNames(cmd, d)
			if err != nil {
				return err
			}
			rows := []taskRow{}
			for _, t := range tasks {
				_, known := names[t.Queue]
				r := taskRow{ID: t.ID.Hex(), Queue: t.Queue.Hex(), QueueName: names[t.Queue], QueueDeleted: !known && !t.Queue.IsZero(), StatusName: "?", Node: t.Node,
					Ctime: timePtr(t.Ctime), Mtime: timePtr(t.Mtime), Parameters: extJSON(t.Parameters)}
				r.Outcome, _ = t.Raw.Lookup(queue.FieldOutcome).StringValueOK()
				r.Unfit = human.Waiting(t)
				if v := t.Raw.Lookup(queue.FieldPriority); v.Type != 0 && v.Type != bson.TypeNull {
					r.Priority = extJSONValue(v)
				}
				if t.StatusOK {
					st := t.Status
					r.Status, r.StatusName = &st, queue.StatusName(st)
				}
				rows = append(rows, r)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), rows)
			}
			now := time.Now()
			tb := newTable(cmd.OutOrStdout(), "ID", "QUEUE", "STATUS", "PRIO", "OUTCOME", "NODE", "CREATED", "CHANGED", "PARAMETERS")
			for i, t := range tasks {
				params := []rune(string(rows[i].Parameters))
				if len(params) > 60 {
					params = append(params[:57:57], []rune("...")...)
				}
				node := t.Node
				if node == "" {
					node = "-"
				}
				outcome := rows[i].Outcome
				if outcome == "" {
					outcome = "-"
				}
				prio := "-"
				if rows[i].Priority != nil {
					prio = human.Escape(string(rows[i].Priority))
				}
				qname := queue.ShownName(rows[i].QueueName)
				if rows[i].QueueDeleted {
					qname = "(deleted)"
				}
				tb.row(t.ID.Hex(), qname, statusText(t), prio, outcome, node, ago(now, t.Ctime), ago(now, t.Mtime), string(params))
			}
			tb.flush()
			if len(tasks) == int(f.Limit) && f.Limit > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "den: showing the newest %d; --limit 0 shows all\n", f.Limit)
			}
			return nil
		}),
	}
	addTaskFilterFlags(cmd)
	cmd.Flags().Int64("limit", 50, "at most this many tasks (0: all)")
	cmd.Flags().String("param", "", "only tasks whose parameter KEY equals VALUE (KEY=VALUE; VALUE a JSON number, which also matches its text, a JSON string, a boolean, else text), under parameters or params")
	return cmd
}

func addTaskFilterFlags(cmd *cobra.Command) {
	cmd.Flags().StringSlice("queue", nil, "only tasks of these queues (names or ids; repeat or separate with commas)")
	cmd.Flags().StringSlice("status", nil, "only tasks with these statuses: codes or names (queued, claimed, running, succeeded, failed, cancelled, orphaned, blocked, terminated)")
	cmd.Flags().String("node", "", "only tasks claimed by this node")
	cmd.Flags().StringSlice("outcome", nil, "only tasks whose last run ended so: "+strings.Join(queue.Outcomes, ", "))
	cmd.Flags().String("since", "", "only tasks created since: a duration back from now (24h, 30m) or a time (2026-11-23, 2026-11-23T10:00:00Z)")
}

// taskFilter reads the filter flags. A --queue that no queue document has
// but that is an id selects the tasks of that deleted queue (den queue
// delete --force leaves them) when deleted allows it (den task list,
// archive, purge); else, or when it is no id, it is an error.
func taskFilter(cmd *cobra.Command, d *database, deleted bool) (queue.TaskFilter, error) {
	var f queue.TaskFilter
	qs, _ := cmd.Flags().GetStringSlice("queue")
	for _, ref := range qs {
		q, _, err := d.store.FindQueue(cmd.Context(), ref)
		id, isID := bson.ObjectIDFromHex(ref)
		switch {
		case errors.Is(err, queue.ErrNoQueue) && isID == nil && deleted:
			f.Queues = append(f.Queues, id)
			continue
		case errors.Is(err, queue.ErrNoQueue) && isID == nil:
			return f, fmt.Errorf("%w: a deleted queue's tasks cannot run again (den task list --queue %s lists them; den task archive or purge --queue %s removes the ended ones)", err, ref, ref)
		case err != nil:
			return f, err
		}
		f.Queues = append(f.Queues, q.ID)
	}
	sts, _ := cmd.Flags().GetStringSlice("status")
	for _, s := range sts {
		st, err := queue.ParseStatus(s)
		if err != nil {
			return f, usageError{err}
		}
		f.Statuses = append(f.Statuses, st)
	}
	f.Node, _ = cmd.Flags().GetString("node")
	outcomes, _ := cmd.Flags().GetStringSlice("outcome")
	for _, o := range outcomes {
		if !slices.Contains(queue.Outcomes, o) {
			return f, usagef("--outcome %q: want one of %s", o, strings.Join(queue.Outcomes, ", "))
		}
		f.Outcomes = append(f.Outcomes, o)
	}
	if since, _ := cmd.Flags().GetString("since"); since != "" {
		t, err := parseSince(since, time.Now())
		if err != nil {
			return f, usageError{err}
		}
		f.Since = t
	}
	return f, nil
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (24h) or a time (2026-11-23, 2026-11-23T10:00:00Z)", s)
}

// queueNames are the queues' names by id, every queue document's: one
// that cannot be used has an empty name. An id it lacks is a deleted
// queue's.
func queueNames(cmd *cobra.Command, d *database) (map[bson.ObjectID]string, error) {
	queues, bad, err := d.store.Queues(cmd.Context())
	if err != nil {
		return nil, err
	}
	names := map[bson.ObjectID]string{}
	for id := range queue.QueueIDs(nil, bad) {
		names[id] = ""
	}
	for _, q := range queues {
		names[q.ID] = q.Name
	}
	return names, nil
}

// outputPlace says where one output stream of a task is.
type outputPlace struct {
	Stream string `json:"stream"`
	Where  string `json:"where"` // inline, gridfs, none
	File   string `json:"file,omitempty"`
	Bytes  int64  `json:"bytes"`
}

func newTaskShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show TASK_ID",
		Short: "Show a task: its document with dates, its history, and where its output is",
		Args:  cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			id, err := parseTaskID(args[0])
			if err != nil {
				return err
			}
			t, archived, err := readTask(cmd.Context(), d, id)
			if err != nil {
				return err
			}
			if t == nil {
				return fmt.Errorf("no task %s in database %s", id.Hex(), d.cfg.Database)
			}
			bucket := gridfs.NewBucket(d.db, queue.GridFSPrefix)
			var places []outputPlace
			for _, stream := range []string{queue.StreamStdout, queue.StreamStderr} {
				text, file, err := t.Output(stream)
				p := outputPlace{Stream: stream}
				switch {
				case errors.Is(err, queue.ErrNoOutput):
					p.Where = "none"
				case err != nil:
					p.Where = err.Error()
				case file.IsZero():
					p.Where, p.Bytes = "inline", int64(len(text))
				default:
					p.Where, p.File = "gridfs", file.Hex()
					if r, err := bucket.Open(cmd.Context(), file); err == nil {
						p.Bytes = r.Length
						r.Close()
					}
				}
				places = append(places, p)
			}
			files, err := bucket.Find(cmd.Context(), id)
			if err != nil {
				return err
			}
			history, herr := t.History()
			var why queue.Reason
			if !archived {
				if why, err = whyLine(cmd, d, *t); err != nil {
					return err
				}
			}
			if wantJSON(cmd) {
				type fileRow struct {
					ID       string `json:"id"`
					Filename string `json:"filename"`
					Bytes    int64  `json:"bytes"`
				}
				fr := []fileRow{}
				for _, f := range files {
					fr = append(fr, fileRow{f.ID.Hex(), f.Filename, f.Length})
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"task": extJSON(t.Raw), "output": places, "gridfs_files": fr, "problems": t.Problems, "runs": len(history) + 1, "archived": archived, "why": whyJSON(why)})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "task %s: %s\n", id.Hex(), statusText(*t))
			if archived {
				fmt.Fprintf(w, "archived: in %s, no longer in tasks\n", queue.ArchiveCollection)
			}
			if why := human.Waiting(*t); why != "" {
				fmt.Fprintf(w, "waits: %s (no live den node offers that; see requested_resources)\n", human.Escape(why))
			}
			if why.Code != "" {
				fmt.Fprintf(w, "why: %s: %s (den task why %s)\n", why.Code, human.Escape(why.Text), id.Hex())
			}
			fmt.Fprintln(w)
			printDoc(w, t.Raw, "")
			fmt.Fprintln(w, "\noutput:")
			for _, p := range places {
				switch p.Where {
				case "inline":
					fmt.Fprintf(w, "  %s: in the task document, %d bytes\n", p.Stream, p.Bytes)
				case "gridfs":
					fmt.Fprintf(w, "  %s: GridFS file %s in tasks.files, %d bytes\n", p.Stream, p.File, p.Bytes)
				default:
					fmt.Fprintf(w, "  %s: %s\n", p.Stream, human.Escape(p.Where))
				}
			}
			if len(files) > 0 {
				fmt.Fprintf(w, "  GridFS files of this task (this run and earlier ones):\n")
				for _, f := range files {
					fmt.Fprintf(w, "    %s %s %d bytes\n", f.ID.Hex(), human.Escape(f.Filename), f.Length)
				}
			}
			fmt.Fprintf(w, "  read it with: den output %s [--stderr]\n", id.Hex())
			if herr != nil {
				fmt.Fprintf(w, "runs: %s\n", human.Escape(herr.Error()))
			} else if len(history) > 0 {
				fmt.Fprintf(w, "\nruns (den output %s --attempt N [--stderr]):\n", id.Hex())
				for i, e := range history {
					fmt.Fprintf(w, "  %d: %s", i+1, human.Escape(historyLine(e)))
					fmt.Fprintln(w)
				}
				fmt.Fprintf(w, "  %d: this run (%s)\n", len(history)+1, statusText(*t))
			}
			for _, p := range t.Problems {
				fmt.Fprintf(w, "problem: %s\n", human.Escape(fmt.Sprint(p)))
			}
			return nil
		}),
	}
}

// historyLine is one earlier run of a task, as den task show lists it.
func historyLine(e queue.HistoryEntry) string {
	line := fmt.Sprintf("status %d (%s) on %s", e.Status, queue.StatusName(e.Status), e.Node)
	if !e.Ended.IsZero() {
		line += ", ended " + e.Ended.UTC().Format(time.RFC3339)
	}
	if e.Outcome != "" {
		line += ", " + e.Outcome
	}
	if e.Reason != "" {
		line += ": " + e.Reason
	}
	if e.RetriedBy != "" {
		line += "; retried by " + e.RetriedBy
	}
	return line
}

func newTaskCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID...",
		Short: "Cancel tasks: a queued one never starts, a running one is stopped (status -5)",
		Long: `Set cancel: true on each task that has not ended. A queued task then never
starts; a running one is stopped by its node (SIGTERM, then SIGKILL after
max_termination_time). Either way its status becomes -5. A task that has
already ended is left alone (and reported); an unknown id is an error
(exit 1, after the others are done).`,
		Args: cobra.MinimumNArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			var ids []bson.ObjectID
			for _, a := range args {
				id, err := parseTaskID(a)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			type result struct {
				ID      string `json:"id"`
				Outcome string `json:"outcome"` // cancelling, ended, missing
			}
			outcomes, err := bulk.Cancel(cmd.Context(), d.store, ids)
			if err != nil {
				return err
			}
			var results []result
			missing := 0
			for i, o := range outcomes {
				r := result{ID: ids[i].Hex()}
				switch o {
				case queue.CancelSet:
					r.Outcome = "cancelling"
				case queue.CancelFinished:
					r.Outcome = "ended"
				default:
					r.Outcome = "missing"
					missing++
				}
				results = append(results, r)
			}
			if wantJSON(cmd) {
				if err := printJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					switch r.Outcome {
					case "cancelling":
						fmt.Fprintf(cmd.OutOrStdout(), "%s: cancel requested (queued: never starts; running: its node stops it)\n", r.ID)
					case "ended":
						fmt.Fprintf(cmd.OutOrStdout(), "%s: already ended; left alone\n", r.ID)
					default:
						fmt.Fprintf(cmd.OutOrStdout(), "%s: no such task\n", r.ID)
					}
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d tasks do not exist in database %s", missing, len(ids), d.cfg.Database)
			}
			return nil
		}),
	}
}

func newTaskRetryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retry [TASK_ID...] [--queue Q] [--status S] [--node N] [--since T]",
		Short: "Run ended tasks again: by id, or every task matching a filter",
		Long: `Put ended tasks (finished, failed, cancelled, orphaned, held) back in their
queue to run again now: status -2, node -1, attempts 0, and den's per-run
fields (start_after, cancel, timed_out, exit_code, signal, orphan_reason,
outcome, outcome_reason, leftover_processes, live, live_until, unfit,
runner) removed. The run that ended goes into the task's history, as an
automatic retry's does (retried_by: operator), with its output (copied to
GridFS if it was kept in the task document): den output ID --attempt N
prints it once the new run has replaced stdout and stderr.
Queued, claimed and running tasks are left alone. Each update is
conditional on the status read, and a task that had finished (status 1 and
up) is counted in its queue's count_todo again; cancelled and orphaned
tasks never left it.

Give task ids, or a filter (at least one of --queue, --status, --node,
--since). More than one task asks for confirmation on a terminal; --yes
skips it and is required when stdin is not a terminal.`,
		Example: `  den task retry 6b02ffcf2e2e26d413036425
  den task retry --queue resize --status failed,orphaned --since 24h --yes`,
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			filtered := false
			for _, f := range []string{"queue", "status", "node", "outcome", "since"} {
				filtered = filtered || cmd.Flags().Changed(f)
			}
			if len(args) > 0 && filtered {
				return usagef("give task ids or a filter, not both")
			}
			if len(args) == 0 && !filtered {
				return usagef("give task ids, or a filter (--queue, --status, --node, --since)")
			}
			var tasks []queue.Task
			skipped := 0
			if filtered {
				f, err := taskFilter(cmd, d, false)
				if err != nil {
					return err
				}
				if tasks, err = d.store.RetryCandidates(cmd.Context(), f); err != nil {
					return err
				}
			}
			for _, a := range args {
				id, err := parseTaskID(a)
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
				if !t.StatusOK || !retryable(t.Status) {
					fmt.Fprintf(cmd.ErrOrStderr(), "den: %s is %s; only ended tasks are retried\n", id.Hex(), statusText(*t))
					skipped++
					continue
				}
				tasks = append(tasks, *t)
			}
			if len(tasks) > 1 {
				if err := confirm(cmd, fmt.Sprintf("retry %d tasks?", len(tasks))); err != nil {
					return err
				}
			}
			done, err := bulk.Retry(cmd.Context(), d.store, tasks, time.Now)
			if err != nil {
				return fmt.Errorf("after %d retried: %w", len(done.Tasks), err)
			}
			retried, recounted := len(done.Tasks), done.Recounted
			skipped += done.Skipped
			var ids []string
			for _, t := range done.Tasks {
				ids = append(ids, t.ID.Hex())
			}
			if wantJSON(cmd) {
				if ids == nil {
					ids = []string{}
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"retried": ids, "skipped": skipped, "count_todo_raised": recounted})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retried %d tasks (count_todo raised by %d for those that had finished)", retried, recounted)
			if skipped > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "; %d left alone (not ended, or changed meanwhile)", skipped)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			for _, h := range done.Held {
				fmt.Fprintln(cmd.ErrOrStderr(), "den: note:", human.Escape(h))
			}
			if len(args) > 0 && retried < len(args) {
				return exitError{ExitError, fmt.Errorf("%d of %d tasks were not retried", len(args)-retried, len(args))}
			}
			return nil
		}),
	}
	addTaskFilterFlags(cmd)
	cmd.Flags().BoolP("yes", "y", false, "do not ask for confirmation")
	return cmd
}

// retryable reports whether den task retry puts a task with this status
// back: anything but queued, claimed and running.
func retryable(status int) bool {
	return status != queue.StatusQueued && status != queue.StatusClaimed && status != queue.StatusRunning
}

// afterOptions reads --after: the tasks must exist and may not have ended
// without succeeding; those not yet succeeded are what the new tasks wait
// for, and are marked so that their runners release the new tasks.
func afterOptions(cmd *cobra.Command, d *database) (queue.InsertOptions, error) {
	var opts queue.InsertOptions
	refs, _ := cmd.Flags().GetStringSlice("after")
	for _, ref := range refs {
		id, err := parseTaskID(ref)
		if err != nil {
			return opts, usageError{fmt.Errorf("--after: %w", err)}
		}
		if !slices.Contains(opts.After, id) {
			opts.After = append(opts.After, id)
		}
	}
	if len(opts.After) == 0 {
		return opts, nil
	}
	statuses, err := d.store.Statuses(cmd.Context(), opts.After)
	if err != nil {
		return opts, err
	}
	for _, id := range opts.After {
		st, ok := statuses[id]
		switch {
		case !ok:
			return opts, fmt.Errorf("--after: no task %s in database %s", id.Hex(), d.cfg.Database)
		case queue.EndedBadly(st):
			return opts, fmt.Errorf("--after: task %s already ended with status %d (%s), so a task after it could never run", id.Hex(), st, queue.StatusName(st))
		case st != queue.StatusSucceeded:
			opts.Waiting = append(opts.Waiting, id)
		}
	}
	return opts, d.store.MarkDependents(cmd.Context(), opts.Waiting)
}

func hexIDs(ids []bson.ObjectID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Hex()
	}
	return out
}

// extJSONValue is one value as relaxed extended JSON (a number as a JSON
// number).
func extJSONValue(v bson.RawValue) json.RawMessage {
	doc, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return nil
	}
	full := extJSON(doc)
	var m struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(full, &m) != nil {
		return nil
	}
	return m.V
}
