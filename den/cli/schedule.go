package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

func newScheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Insert tasks at set times: add, list, show, pause, resume and delete schedules",
		Long: `A schedule makes the nodes insert a task into a queue at the times it names:
a cron expression (five fields, or six with seconds first; @daily and kin)
in a time zone, or an interval. Exactly one task per scheduled time,
however many nodes run. Times missed while no node was up are skipped
(--missed skip, the default), fired once (once) or each fired (each); a
time that comes while the schedule's last task has not ended is skipped
(--overlap skip, the default) or fired anyway (allow).`,
	}
	cmd.AddCommand(newScheduleAddCmd(), newScheduleListCmd(), newScheduleShowCmd(),
		newSchedulePauseCmd(true), newSchedulePauseCmd(false), newScheduleDeleteCmd())
	for _, c := range cmd.Commands() {
		addDBFlags(c.Flags())
		addJSONFlag(c.Flags())
	}
	return cmd
}

func newScheduleAddCmd() *cobra.Command {
	var (
		q, cronExpr, tz, params, task, missed, overlap string
		every                                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add NAME --queue Q (--cron EXPR [--tz ZONE] | --every DURATION) [--parameters JSON]",
		Short: "Add a schedule",
		Example: `  den schedule add nightly --queue reports --cron "0 2 * * 1-5" --tz Europe/Berlin --parameters '{"report":"daily"}'
  den schedule add poll --queue fetch --every 5m --overlap skip`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			if q == "" {
				return usagef("--queue is required")
			}
			if cmd.Flags().Changed("every") && every <= 0 {
				// Not "give cron or every": --every is given, and wrong.
				return usagef("--every %s: an interval must be positive (at least 1s)", every)
			}
			spec := queue.ScheduleSpec{Name: args[0], Cron: cronExpr, TZ: tz, Every: every, Missed: missed, Overlap: overlap}
			for _, f := range []struct {
				flag, text string
				into       *bson.Raw
			}{{"parameters", params, &spec.Parameters}, {"task", task, &spec.Task}} {
				if f.text == "" {
					continue
				}
				var doc bson.Raw
				if err := bson.UnmarshalExtJSON([]byte(f.text), false, &doc); err != nil {
					return usagef("--%s: not a JSON object: %v", f.flag, err)
				}
				*f.into = doc
			}
			if err := spec.Validate(); err != nil {
				return usageError{fmt.Errorf("schedule %q: %w", spec.Name, err)}
			}
			qu, _, err := d.store.FindQueue(cmd.Context(), q)
			if err != nil {
				return err
			}
			spec.Queue = qu.ID
			sc, err := d.store.AddSchedule(cmd.Context(), spec, time.Now())
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), scheduleRowOf(sc, map[bson.ObjectID]string{qu.ID: qu.Name}))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added schedule %s: %s into queue %s; first at %s\n", human.Escape(sc.Name), whenText(sc), human.Escape(qu.Name), stamp(sc.Next))
			return nil
		}),
	}
	cmd.Flags().StringVar(&q, "queue", "", "queue the tasks go into (name or id)")
	cmd.Flags().StringVar(&cronExpr, "cron", "", `cron expression: "MIN HOUR DOM MON DOW", or with seconds first, or @daily, @hourly...`)
	cmd.Flags().StringVar(&tz, "tz", "", "time zone of --cron (IANA name, e.g. Europe/Berlin; default UTC)")
	cmd.Flags().DurationVar(&every, "every", 0, "interval instead of --cron: 30s, 5m, 24h")
	cmd.Flags().StringVar(&params, "parameters", "", "the tasks' parameters, a JSON object")
	cmd.Flags().StringVar(&task, "task", "", `other fields of the tasks, a JSON object (e.g. {"timeout": 600, "max_retries": 2})`)
	cmd.Flags().StringVar(&missed, "missed", queue.MissedSkip, "times missed while no node was up: skip, once or each")
	cmd.Flags().StringVar(&overlap, "overlap", queue.OverlapSkip, "a time that comes while the last task has not ended: skip or allow")
	return cmd
}

// scheduleRow is a schedule as den schedule list prints it.
type scheduleRow struct {
	Name     string `json:"name"`
	Queue    string `json:"queue"`
	When     string `json:"when"`
	Missed   string `json:"missed"`
	Overlap  string `json:"overlap"`
	Paused   bool   `json:"paused"`
	Next     string `json:"next,omitempty"`
	Last     string `json:"last,omitempty"`
	LastTask string `json:"last_task,omitempty"`
	Skipped  string `json:"last_skipped,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

func scheduleRowOf(sc queue.Schedule, names map[bson.ObjectID]string) scheduleRow {
	r := scheduleRow{Name: sc.Name, Queue: names[sc.Queue], When: whenText(sc), Missed: sc.Missed, Overlap: sc.Overlap, Paused: sc.Paused, Problem: sc.Problem}
	if r.Queue == "" {
		r.Queue = sc.Queue.Hex()
	}
	if !sc.Next.IsZero() && !sc.Paused {
		r.Next = sc.Next.UTC().Format(time.RFC3339)
	}
	if sc.Last != nil {
		r.Last, r.Skipped = sc.Last.At.UTC().Format(time.RFC3339), sc.Last.Skipped
	}
	if !sc.LastTask.IsZero() {
		r.LastTask = sc.LastTask.Hex()
	}
	return r
}

// whenText says when a schedule fires.
func whenText(sc queue.Schedule) string {
	if sc.Every > 0 {
		return "every " + sc.Every.String()
	}
	tz := sc.TZ
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("cron %q %s", sc.Cron, tz)
}

func newScheduleListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last times and the last task's state",
		Args:  cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			scs, err := d.store.Schedules(cmd.Context())
			if err != nil {
				return err
			}
			names, err := queueNames(cmd, d)
			if err != nil {
				return err
			}
			rows := []scheduleRow{}
			var last []bson.ObjectID
			for _, sc := range scs {
				rows = append(rows, scheduleRowOf(sc, names))
				if !sc.LastTask.IsZero() {
					last = append(last, sc.LastTask)
				}
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), rows)
			}
			statuses, err := d.store.Statuses(cmd.Context(), last)
			if err != nil {
				return err
			}
			t := newTable(cmd.OutOrStdout(), "NAME", "QUEUE", "WHEN", "NEXT", "LAST", "LAST TASK", "MISSED/OVERLAP", "STATE")
			for i, r := range rows {
				next, lastAt, lastTask := "-", "-", "-"
				if r.Next != "" {
					next = stamp(scs[i].Next)
				}
				if sc := scs[i]; sc.Last != nil {
					lastAt = stamp(sc.Last.At)
					if sc.Last.Skipped != "" {
						lastAt += " (skipped: " + sc.Last.Skipped + ")"
					}
				}
				if id := scs[i].LastTask; !id.IsZero() {
					lastTask = id.Hex()
					if st, ok := statuses[id]; ok {
						lastTask += " " + queue.StatusName(st)
					} else {
						lastTask += " (gone)"
					}
				}
				state := "active"
				switch {
				case r.Problem != "":
					state = "cannot fire: " + r.Problem
				case r.Paused:
					state = "paused"
				}
				t.row(r.Name, queue.ShownName(r.Queue), r.When, next, lastAt, lastTask, r.Missed+"/"+r.Overlap, state)
			}
			t.flush()
			return nil
		}),
	}
}

func newScheduleShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule's document",
		Args:  cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			sc, err := d.store.Schedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if sc == nil {
				return fmt.Errorf("no schedule %q in database %s", args[0], d.cfg.Database)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), extJSON(sc.Raw))
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "schedule %s: %s\n", human.Escape(sc.Name), whenText(*sc))
			if sc.Problem != "" {
				fmt.Fprintf(w, "cannot fire: %s\n", human.Escape(sc.Problem))
			}
			fmt.Fprintln(w)
			printDoc(w, sc.Raw, "")
			return nil
		}),
	}
}

func newSchedulePauseCmd(pause bool) *cobra.Command {
	use, short := "pause", "Pause a schedule: no task is inserted until it is resumed"
	if !pause {
		use, short = "resume", "Resume a paused schedule, from its first time after now"
	}
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			ok, err := d.store.PauseSchedule(cmd.Context(), args[0], pause, time.Now())
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("no schedule %q in database %s", args[0], d.cfg.Database)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%sd schedule %s\n", use, human.Escape(args[0]))
			return nil
		}),
	}
}

func newScheduleDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the tasks it inserted stay)",
		Args:  cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			ok, err := d.store.DeleteSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("no schedule %q in database %s", args[0], d.cfg.Database)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted schedule %s\n", human.Escape(args[0]))
			return nil
		}),
	}
}
