package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/cli/queueset"
	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

func newQueueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Create, list, show, change, pause, resume and delete queues",
	}
	cmd.AddCommand(newQueueCreateCmd(), newQueueListCmd(), newQueueShowCmd(), newQueueSetCmd(), newQueueDeleteCmd(),
		newQueuePauseCmd(), newQueueResumeCmd())
	for _, c := range cmd.Commands() {
		addDBFlags(c.Flags())
		addJSONFlag(c.Flags())
	}
	return cmd
}

// queueFlags maps den queue create's flags to queue settings.
var queueFlags = []struct{ flag, key, help string }{
	{"plugin", queue.SettingPlugin, "plugin the queue's tasks run with (written as constructor), e.g. Disbatch::Plugin::Demo (required)"},
	{"maxthreads", queue.SettingMaxThreads, "tasks of the queue each node may run at once (default 1 unless --threads)"},
	{"threads", queue.SettingThreads, "tasks of the queue all nodes together may run at once (instead of --maxthreads)"},
	{"sort", queue.SettingSort, "order tasks are claimed in: fifo, lifo or default (default fifo)"},
	{"gfs", queue.SettingGFS, "where output goes: true, false or auto (default: the node's)"},
	{"timeout", queue.FieldTimeout, "seconds (or a duration such as 10m) a run may take"},
	{"max-retries", queue.FieldMaxRetries, "retries of a failed run"},
	{"retry-delay", queue.FieldRetryDelay, "seconds before the first retry (doubling after)"},
	{"max-termination-time", queue.FieldMaxTermination, "seconds between SIGTERM and SIGKILL when a run is stopped"},
	{"max-output", queue.FieldMaxOutput, "bytes a run may write to each of stdout and stderr"},
	{"rate-limit", queue.FieldRateLimit, "STARTS/PERIOD: at most so many of its tasks start in any such period, on all den nodes (2/10s)"},
}

func newQueueCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create NAME --plugin PLUGIN [--maxthreads N | --threads N] [flags]",
		Short: "Create a queue",
		Long: `Create a queue document as the protocol defines it (name, constructor,
maxthreads or threads, sort, counts at 0) with den's optional control
defaults for its tasks. Values are checked with the decoders the nodes use.
A second queue of the same name is refused. Prints the new queue's id.`,
		Example: `  den queue create resize --plugin Disbatch::Plugin::Demo --maxthreads 4
  den queue create jobs --plugin Disbatch::Plugin::Command --threads 10 --timeout 10m --max-retries 3`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			var s queue.QueueSettings
			if err := queueset.Parse(&s, queue.SettingName, args[0]); err != nil {
				return usageError{err}
			}
			if !cmd.Flags().Changed("plugin") {
				return usagef("give the queue's plugin with --plugin, e.g. --plugin Disbatch::Plugin::Demo")
			}
			if cmd.Flags().Changed("maxthreads") && cmd.Flags().Changed("threads") {
				return usagef("give --maxthreads (per node) or --threads (on all nodes together), not both")
			}
			if !cmd.Flags().Changed("maxthreads") && !cmd.Flags().Changed("threads") {
				if err := queueset.Parse(&s, queue.SettingMaxThreads, "1"); err != nil {
					return err
				}
			}
			if !cmd.Flags().Changed("sort") {
				if err := queueset.Parse(&s, queue.SettingSort, queue.SortFIFO); err != nil {
					return err
				}
			}
			for _, f := range queueFlags {
				if cmd.Flags().Changed(f.flag) {
					v, _ := cmd.Flags().GetString(f.flag)
					if err := queueset.Parse(&s, f.key, v); err != nil {
						return usageError{fmt.Errorf("--%s: %w", f.flag, err)}
					}
				}
			}
			plugin, _ := cmd.Flags().GetString("plugin")
			id, err := d.store.CreateQueueWith(cmd.Context(), s)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]string{"id": id.Hex(), "name": args[0]})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created queue %s (%s)\n", human.Escape(args[0]), id.Hex())
			warnPlugin(cmd, plugin)
			return nil
		}),
	}
	for _, f := range queueFlags {
		cmd.Flags().String(f.flag, "", f.help)
	}
	return cmd
}

// warnPlugin says so when this den binary has no such plugin: the queue
// may be meant for Perl nodes or another build, so it is not an error.
func warnPlugin(cmd *cobra.Command, name string) {
	if _, ok := plugins.Default().Lookup(name); !ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "den: note: this den has no plugin %q (it has %s); only nodes that have it will run the queue's tasks\n",
			name, human.Escape(strings.Join(plugins.Default().Names(), ", ")))
	}
}

// queueRow is a queue as den queue list prints it.
type queueRow struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Plugin     string `json:"plugin"`
	Limit      int    `json:"limit"`
	Global     bool   `json:"limit_on_all_nodes"`
	Sort       string `json:"sort"`
	Todo       int64  `json:"todo"`
	Running    int64  `json:"running"`
	Done       int64  `json:"done"`
	Failed     int64  `json:"failed"`
	Cancelled  int64  `json:"cancelled"`
	CountTodo  *int64 `json:"count_todo"`
	CountTotal *int64 `json:"count_total"`
	Problem    string `json:"problem,omitempty"`
	// Paused is set when the queue is paused (Limit is then 0).
	Paused *pausedRow `json:"paused,omitempty"`
	// RateLimit is its rate limit as den queue set takes it (2/10s); null:
	// none.
	RateLimit *string `json:"rate_limit"`
	// Deleted is set on a deleted queue's row: tasks name its id, but no
	// queue document has it (queue.DeletedQueue); only ID and the counts
	// are set.
	Deleted bool `json:"deleted,omitempty"`
}

func newDeletedRow(q queue.DeletedQueue) queueRow {
	c := q.Counts
	return queueRow{ID: q.ID.Hex(), Deleted: true,
		Todo: c.Group(queue.GroupTodo), Running: c.Group(queue.GroupRunning), Done: c.Group(queue.GroupDone),
		Failed: c.Group(queue.GroupFailed), Cancelled: c.Group(queue.GroupCancelled)}
}

func newQueueRow(q queue.Queue, c queue.StatusCounts) queueRow {
	r := queueRow{
		ID: q.ID.Hex(), Name: q.Name, Plugin: q.Plugin, Limit: q.MaxThreads, Global: q.Global, Sort: q.Sort,
		Todo: c.Group(queue.GroupTodo), Running: c.Group(queue.GroupRunning), Done: c.Group(queue.GroupDone),
		Failed: c.Group(queue.GroupFailed), Cancelled: c.Group(queue.GroupCancelled),
		CountTodo: q.CountTodo, CountTotal: q.CountTotal, Problem: q.MaxThreadsProblem, Paused: newPausedRow(q.Paused),
	}
	if q.RateLimit != nil {
		rate := q.RateLimit.String()
		r.RateLimit = &rate
	}
	return r
}

// rate is the queue's rate limit as the table shows it (- : none).
func (r queueRow) rate() string {
	if r.RateLimit == nil {
		return "-"
	}
	return *r.RateLimit
}

func (r queueRow) limit() string {
	if r.Paused != nil {
		return "paused (resumes: " + r.Paused.Resumes + ")"
	}
	if r.Global {
		return strconv.Itoa(r.Limit) + " (all nodes)"
	}
	return strconv.Itoa(r.Limit) + " per node"
}

func countText(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

func newQueueListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List queues with their limits and tasks: todo, running, done, failed, cancelled",
		Long: `List every queue with its limit (paused: the one it resumes with), its rate
limit (RATE: at most STARTS of its tasks start in any PERIOD, on all den
nodes together; - : none), and its tasks counted by state from the tasks
themselves (one aggregation): todo (queued or held: -2, -3, -4), running (claimed or
running: -1, 0), done (1), failed (2 and up, or orphaned -6), cancelled
(-5); and the queue's stored count_todo/count_total (den counts check
compares them). count_todo is Disbatch's bookkeeping, under its own name: it
counts every task with status 0 or less, cancelled and orphaned ones too,
which never run, so it is more than TODO once a task was cancelled.

Then the deleted queues: ids that tasks name but no queue document has
(den queue delete --force leaves a queue's tasks), with their tasks
counted the same way; den task list --queue ID lists them, den task
archive or purge --queue ID removes the ended ones. --json gives the queue
documents only, as before; den status --json gives the deleted queues too
(deleted_queues).`,
		Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			l, err := queueRows(cmd, d)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), l.rows)
			}
			printQueueTable(cmd, l.rows)
			printDeletedQueues(cmd, l.deleted)
			for _, b := range l.bad {
				fmt.Fprintf(cmd.ErrOrStderr(), "den: queue %s cannot be used: %s\n", human.Escape(fmt.Sprint(b.ID)), human.Escape(fmt.Sprint(b.Reason)))
			}
			return nil
		}),
	}
}

// queueListing is what den queue list and den status show of the queues,
// from one census: a row per queue document, the documents that cannot be
// used, and a row per deleted queue (queue.Census.Deleted).
type queueListing struct {
	rows, deleted []queueRow
	bad           []queue.MalformedQueue
}

func queueRows(cmd *cobra.Command, d *database) (queueListing, error) {
	l := queueListing{rows: []queueRow{}, deleted: []queueRow{}}
	queues, bad, err := d.store.Queues(cmd.Context())
	if err != nil {
		return l, err
	}
	l.bad = bad
	census, err := takeCensus(cmd, d)
	if err != nil {
		return l, err
	}
	for _, q := range queues {
		l.rows = append(l.rows, newQueueRow(q, census.Queues[q.ID]))
	}
	slices.SortStableFunc(l.rows, func(a, b queueRow) int { return strings.Compare(a.Name, b.Name) })
	for _, q := range census.Deleted(queues, bad) {
		l.deleted = append(l.deleted, newDeletedRow(q))
	}
	return l, nil
}

// printDeletedQueues prints the deleted queues' table, when there are
// any, and how to find and remove their tasks.
func printDeletedQueues(cmd *cobra.Command, rows []queueRow) {
	if len(rows) == 0 {
		return
	}
	w := cmd.OutOrStdout()
	fmt.Fprintln(w, "\nDELETED QUEUES (tasks whose queue document is gone; no node runs them)")
	t := newTable(w, "ID", "TODO", "RUNNING", "DONE", "FAILED", "CANCELLED")
	for _, r := range rows {
		t.row(r.ID, itoa(r.Todo), itoa(r.Running), itoa(r.Done), itoa(r.Failed), itoa(r.Cancelled))
	}
	t.flush()
	fmt.Fprintln(w, "their tasks: den task list --queue ID; den task archive --queue ID (or purge) removes the ended ones")
}

func printQueueTable(cmd *cobra.Command, rows []queueRow) {
	t := newTable(cmd.OutOrStdout(), "NAME", "ID", "PLUGIN", "LIMIT", "RATE", "SORT", "TODO", "RUNNING", "DONE", "FAILED", "CANCELLED", "COUNT_TODO/TOTAL")
	for _, r := range rows {
		t.row(queue.ShownName(r.Name), r.ID, r.Plugin, r.limit(), r.rate(), r.Sort, itoa(r.Todo), itoa(r.Running), itoa(r.Done), itoa(r.Failed), itoa(r.Cancelled),
			countText(r.CountTodo)+"/"+countText(r.CountTotal))
	}
	t.flush()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newQueueShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME|ID",
		Short: "Show a queue's document and its tasks counted by status",
		Args:  cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			q, problem, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			census, err := takeCensus(cmd, d, q.ID)
			if err != nil {
				return err
			}
			c := census.Queues[q.ID]
			byStatus := map[string]int64{}
			for st, n := range c.ByStatus {
				byStatus[strconv.Itoa(st)] = n
			}
			if wantJSON(cmd) {
				out := map[string]any{"queue": extJSON(q.Raw), "tasks_by_status": byStatus, "tasks": c.Total()}
				if problem != nil {
					out["problem"] = problem.Error()
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			w := cmd.OutOrStdout()
			printDoc(w, q.Raw, "")
			if problem != nil {
				fmt.Fprintf(w, "\nproblem: %s\n", human.Escape(problem.Error()))
			}
			if p := newPausedRow(q.Paused); p != nil {
				fmt.Fprintf(w, "\npaused%s%s; resumes with %s (den queue resume)\n", sinceText(p.At), byText(p.By), p.Resumes)
			}
			fmt.Fprintf(w, "\ntasks: %d\n", c.Total())
			sts := make([]int, 0, len(c.ByStatus))
			for st := range c.ByStatus {
				sts = append(sts, st)
			}
			slices.Sort(sts)
			for _, st := range sts {
				fmt.Fprintf(w, "  %4d %-11s %d\n", st, queue.StatusName(st), c.ByStatus[st])
			}
			if c.Other > 0 {
				fmt.Fprintf(w, "  status not a number: %d\n", c.Other)
			}
			return nil
		}),
	}
}

func newQueueSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME|ID key=value...",
		Short: "Change a queue's settings (value none removes a setting)",
		Long: `Change settings of a queue, with the checks of den queue create. Keys:
` + strings.Join(queue.QueueSettingKeys, ", ") + ` (plugin is accepted for
constructor). The value none removes the key (the node's or den's default
applies). Setting maxthreads removes threads and the other way round. On a
paused queue, maxthreads and threads set the limit it resumes with.`,
		Example: `  den queue set resize maxthreads=8 timeout=10m
  den queue set resize max_retries=none
  den queue set api rate_limit=2/10s     # at most 2 starts in any 10 s, on all den nodes`,
		Args: cobra.MinimumNArgs(2),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			var s queue.QueueSettings
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return usagef("%q: want key=value", kv)
				}
				if err := queueset.Parse(&s, k, v); err != nil {
					return usageError{err}
				}
			}
			q, _, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := d.store.UpdateQueue(cmd.Context(), q.ID, s); err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]string{"id": q.ID.Hex(), "name": q.Name})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "updated queue %s (%s)\n", human.Escape(queue.ShownName(q.Name)), q.ID.Hex())
			if q.Paused != nil {
				fmt.Fprintln(cmd.OutOrStdout(), "the queue is paused: a limit set now applies when it is resumed (den queue resume)")
			}
			return nil
		}),
	}
}

func newQueueDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete NAME|ID",
		Short: "Delete a queue (refused while it has unfinished tasks, unless --force)",
		Long: `Delete a queue document. Its tasks stay in the tasks collection, with their
output, as Disbatch's own deleteQueue leaves them. A queue with unfinished
tasks (queued, held, claimed or running) is refused unless --force.
Asks for confirmation on a terminal; --yes skips it (and is required when
stdin is not a terminal).`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			q, _, err := d.store.FindQueue(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			counts, err := d.store.TaskCounts(cmd.Context(), q.ID)
			if err != nil {
				return err
			}
			c := counts[q.ID]
			force, _ := cmd.Flags().GetBool("force")
			if n := c.Group(queue.GroupTodo) + c.Group(queue.GroupRunning); n > 0 && !force {
				return fmt.Errorf("queue %s (%s) has %d unfinished tasks (queued, held, claimed or running); cancel them, or give --force", queue.ShownName(q.Name), q.ID.Hex(), n)
			}
			if err := confirm(cmd, fmt.Sprintf("delete queue %s (%s), which has %d tasks?", queue.ShownName(q.Name), q.ID.Hex(), c.Total())); err != nil {
				return err
			}
			if err := d.store.DeleteQueue(cmd.Context(), q.ID); err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": q.ID.Hex(), "name": q.Name, "deleted": true, "tasks_left": c.Total()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted queue %s (%s); its %d tasks are left in tasks\n", human.Escape(queue.ShownName(q.Name)), q.ID.Hex(), c.Total())
			return nil
		}),
	}
	cmd.Flags().Bool("force", false, "delete even when the queue has unfinished tasks")
	cmd.Flags().BoolP("yes", "y", false, "do not ask for confirmation")
	return cmd
}

// printDoc prints a document one field a line, dates as local times, and
// nested documents indented; keys and values escaped (human.Escape).
func printDoc(w interface{ Write([]byte) (int, error) }, raw bson.Raw, indent string) {
	elems, _ := raw.Elements()
	for _, e := range elems {
		v := e.Value()
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			fmt.Fprintf(w, "%s%s:\n", indent, human.Escape(e.Key()))
			printDoc(w, v.Document(), indent+"  ")
			continue
		case bson.TypeArray:
			vals, _ := v.Array().Values()
			if len(vals) > 0 && vals[0].Type == bson.TypeEmbeddedDocument {
				fmt.Fprintf(w, "%s%s:\n", indent, human.Escape(e.Key()))
				for i, x := range vals {
					fmt.Fprintf(w, "%s  - [%d]\n", indent, i)
					if d, ok := x.DocumentOK(); ok {
						printDoc(w, d, indent+"    ")
					}
				}
				continue
			}
		}
		fmt.Fprintf(w, "%s%s: %s\n", indent, human.Escape(e.Key()), human.Escape(valueText(v)))
	}
}

// valueText renders a value for people.
func valueText(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeDateTime:
		return stamp(v.Time())
	case bson.TypeString:
		s := v.StringValue()
		if len(s) > 200 {
			s = s[:200] + fmt.Sprintf("... (%d bytes)", len(v.StringValue()))
		}
		return strconv.Quote(s)
	case bson.TypeObjectID:
		return v.ObjectID().Hex()
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeBoolean, bson.TypeNull:
		b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
		if err == nil {
			return strings.TrimSuffix(strings.TrimPrefix(string(b), `{"v":`), "}")
		}
	}
	return v.String()
}
