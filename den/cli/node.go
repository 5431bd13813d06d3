package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List nodes, set a node's maxthreads, quiet and resume a node, and forget a stopped or dead node",
	}
	cmd.AddCommand(newNodeListCmd(), newNodeSetCmd(), newNodeQuietCmd(true), newNodeQuietCmd(false), newNodeForgetCmd())
	for _, c := range cmd.Commands() {
		addDBFlags(c.Flags())
		addJSONFlag(c.Flags())
	}
	return cmd
}

// nodeRow is a node as den node list prints it.
type nodeRow struct {
	Name       string         `json:"node"`
	Heartbeat  *time.Time     `json:"timestamp"`
	AgeSeconds *float64       `json:"heartbeat_age_seconds"`
	MaxThreads *int           `json:"maxthreads"`
	Problem    string         `json:"problem,omitempty"`
	Running    int            `json:"running"`
	PerQueue   map[string]int `json:"running_per_queue"`
	Version    string         `json:"version,omitempty"`
	// State is running, stopped (it said so as it stopped) or dead
	// (silent for longer than dead_node_after); Stopped is when it
	// stopped.
	State   string     `json:"state"`
	Stopped *time.Time `json:"stopped,omitempty"`
	// Quiet is set when the node is quiet (den node quiet; MaxThreads is
	// then 0): the maxthreads it resumes with ("none": no limit), since
	// when and by whom.
	Quiet *pausedRow `json:"quiet,omitempty"`
}

func nodeRows(cmd *cobra.Command, d *database, now time.Time) ([]nodeRow, error) {
	nodes, err := d.store.Nodes(cmd.Context())
	if err != nil {
		return nil, err
	}
	queues, _, err := d.store.Queues(cmd.Context())
	if err != nil {
		return nil, err
	}
	names := map[bson.ObjectID]string{}
	for _, q := range queues {
		names[q.ID] = q.Name
	}
	running, err := d.store.RunningAll(cmd.Context())
	if err != nil {
		return nil, err
	}
	rows := []nodeRow{}
	for _, n := range nodes {
		r := nodeRow{Name: n.Name, MaxThreads: n.MaxThreads, Problem: n.MaxThreadsProblem, Version: n.Version, PerQueue: map[string]int{},
			State: n.State(now, deadAfter(d))}
		if q := n.Quiet(); q != nil {
			r.Quiet = newQuietRow(*q)
		}
		if n.StoppedCleanly() {
			at := n.Stopped
			r.Stopped = &at
		}
		if !n.Timestamp.IsZero() {
			ts := n.Timestamp
			age := now.Sub(ts).Seconds()
			r.Heartbeat, r.AgeSeconds = &ts, &age
		}
		for qid, byNode := range running {
			if c := byNode[n.Name]; c > 0 {
				r.PerQueue[names[qid]] += c
				r.Running += c
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// newQuietRow is a quiet node's mark as den node list shows it.
func newQuietRow(q queue.Quiet) *pausedRow {
	r := &pausedRow{Resumes: q.Limit(), By: q.By}
	if !q.At.IsZero() {
		at := q.At
		r.At = &at
	}
	return r
}

// limit is the node's maxthreads as the table shows it: a number, none,
// invalid (0), or quiet with the maxthreads it resumes with.
func (r nodeRow) limit() string {
	switch {
	case r.Quiet != nil:
		return "quiet (resumes: " + r.Quiet.Resumes + ")"
	case r.Problem != "":
		return "invalid (0)"
	case r.MaxThreads != nil:
		return strconv.Itoa(*r.MaxThreads)
	}
	return "none"
}

func printNodeTable(cmd *cobra.Command, rows []nodeRow, now time.Time) {
	t := newTable(cmd.OutOrStdout(), "NODE", "STATE", "HEARTBEAT", "MAXTHREADS", "RUNNING", "PER QUEUE", "VERSION")
	for _, r := range rows {
		hb := "-"
		if r.Heartbeat != nil {
			hb = ago(now, *r.Heartbeat)
		}
		limit := r.limit()
		var per []string
		for q, c := range r.PerQueue {
			per = append(per, fmt.Sprintf("%s:%d", queue.ShownName(q), c))
		}
		sort.Strings(per)
		pq := strings.Join(per, " ")
		if pq == "" {
			pq = "-"
		}
		v := r.Version
		if v == "" {
			v = "-"
		}
		t.row(r.Name, r.State, hb, limit, strconv.Itoa(r.Running), pq, v)
	}
	t.flush()
}

func newNodeListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List nodes: state, heartbeat age, maxthreads, tasks running per queue, version",
		Long: `List the node documents: each node's state (running; stopped, when a den
node said so as it stopped cleanly; dead, when it has been silent for
longer than dead_node_after, 1 minute by default, without saying so: the
others take it for dead), when it last wrote its heartbeat, its node-wide
maxthreads (none: no limit; quiet (resumes: N) for a node den node quiet
quieted, with the maxthreads den node resume gives it back), the tasks
claimed or running under its name per queue (counted from the tasks), and
its version when it writes one.`,
		Args: cobra.NoArgs,
		RunE: withDB(func(cmd *cobra.Command, _ []string, d *database) error {
			now := time.Now()
			rows, err := nodeRows(cmd, d, now)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), rows)
			}
			printNodeTable(cmd, rows, now)
			return nil
		}),
	}
}

func newNodeSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set NODE maxthreads N|none",
		Short: "Set a node's node-wide maxthreads (none: no limit, 0: run nothing)",
		Long: `Limit a node to N tasks across all its queues, by setting maxthreads in its
node document (the node reads it and never overwrites it). none removes the
limit; 0 makes the node run nothing new. The node must have a document.`,
		Example: `  den node set worker01 maxthreads 8
  den node set worker01 maxthreads none`,
		Args: cobra.ExactArgs(3),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			if args[1] != "maxthreads" {
				return usagef("%q: the only node setting is maxthreads", args[1])
			}
			var limit *int
			if !strings.EqualFold(args[2], "none") {
				n, err := strconv.Atoi(args[2])
				if err != nil || n < 0 || n > 1<<20 {
					return usagef("maxthreads %q: want a whole number from 0 to %d, or none", args[2], 1<<20)
				}
				limit = &n
			}
			if err := d.store.SetNodeMaxThreads(cmd.Context(), args[0], limit); err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"node": args[0], "maxthreads": limit})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: maxthreads %s\n", human.Escape(args[0]), args[2])
			return nil
		}),
	}
}

func newNodeForgetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "forget NODE",
		Short: "Remove the node document of a stopped or dead node",
		Long: `Remove a node's document, so that den node list, den status and the page no
longer show it. Refused for a running node (one that wrote its document
within dead_node_after and did not say it stopped), and for a node that
still holds claimed or running tasks. A node that starts again under the
name writes a new document.`,
		Args: cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			n, err := d.store.ForgetNode(cmd.Context(), args[0], time.Now(), deadAfter(d))
			if err != nil {
				return err
			}
			state := n.State(time.Now(), deadAfter(d))
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"node": n.Name, "forgotten": true, "state": state})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forgot node %s (%s)\n", human.Escape(n.Name), state)
			return nil
		}),
	}
}

func newNodeQuietCmd(quiet bool) *cobra.Command {
	use, short, long := "quiet", "Quiet a node: it claims nothing new, and its running tasks go on to their end",
		`Quiet a node, as before a restart or a host's maintenance: it claims no new
task, and the tasks it runs go on to their end. Its node document gets
maxthreads 0 and keeps the maxthreads it had in quiet: {maxthreads, at, by};
den node resume puts it back. Node maxthreads is Disbatch's own field, so a
Perl Disbatch node is quieted too. A quiet node is left as it is.`
	if !quiet {
		use, short, long = "resume", "Resume a quiet node: it claims again, with the maxthreads it had",
			`End a node's quiet: its maxthreads becomes what it was when it was quieted
(no limit if it had none). A node that is not quiet is left as it is.`
	}
	return &cobra.Command{
		Use:     use + " NODE",
		Short:   short,
		Long:    long,
		Example: "  den node " + use + " worker01",
		Args:    cobra.ExactArgs(1),
		RunE: withDB(func(cmd *cobra.Command, args []string, d *database) error {
			var o queue.PauseOutcome
			var err error
			if quiet {
				o, err = d.store.QuietNode(cmd.Context(), args[0], strings.Replace(operator(), "den queue pause", "den node quiet", 1), time.Now())
			} else {
				o, err = d.store.ResumeNode(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			changed := o == queue.PauseDone
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"node": args[0], "action": use, "changed": changed})
			}
			switch {
			case changed && quiet:
				fmt.Fprintf(cmd.OutOrStdout(), "node %s is quiet: it claims nothing new; its running tasks go on\n", human.Escape(args[0]))
			case changed:
				fmt.Fprintf(cmd.OutOrStdout(), "node %s resumed\n", human.Escape(args[0]))
			case quiet:
				fmt.Fprintf(cmd.OutOrStdout(), "node %s was quiet already; nothing changed\n", human.Escape(args[0]))
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "node %s was not quiet; nothing changed\n", human.Escape(args[0]))
			}
			return nil
		}),
	}
}
