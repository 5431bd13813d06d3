package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// addDBFlags defines the flags that locate the database, with the names
// den run uses (config.Load reads them).
func addDBFlags(fs *pflag.FlagSet) {
	fs.StringP("config", "c", "", "configuration file: den YAML, or a Disbatch config.json")
	fs.String("mongo-uri", "", "MongoDB URI (env DEN_MONGO_URI)")
	fs.String("database", "", "database name (env DEN_DATABASE; default disbatch)")
}

// addJSONFlag defines --json.
func addJSONFlag(fs *pflag.FlagSet) {
	fs.Bool("json", false, "print JSON instead of a table, for scripts")
}

func wantJSON(cmd *cobra.Command) bool {
	j, _ := cmd.Flags().GetBool("json")
	return j
}

// database is an open connection to the configured Disbatch database.
type database struct {
	cfg    config.Config
	client *mongo.Client
	db     *mongo.Database
	store  queue.OperatorStore
}

func (d *database) close(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	d.client.Disconnect(dctx)
}

// openDB loads the configuration as den run does and connects. A
// configuration refused and a missing URI are usage errors; with ping, an
// unreachable server an operational one (without, the client connects in
// the background, as den run's).
func openDB(cmd *cobra.Command, ping bool) (*database, error) {
	cfg, err := config.Load("", cmd.Flags())
	if err != nil {
		return nil, usageError{err}
	}
	if cfg.MongoURI == "" {
		return nil, usagef("no MongoDB configured: give --config FILE, --mongo-uri URI (with --database), or DEN_MONGO_URI")
	}
	client, err := connect(cfg.MongoURI, "den "+cmd.Name())
	if err != nil {
		return nil, err
	}
	db := client.Database(cfg.Database)
	d := &database{cfg: cfg, client: client, db: db, store: queue.NewStore(db)}
	if !ping {
		return d, nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		client.Disconnect(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("cannot reach MongoDB (database %s): %w", cfg.Database, err)
	}
	return d, nil
}

// withDB runs f with an open database that answered a ping, closing it
// afterwards.
func withDB(f func(cmd *cobra.Command, args []string, d *database) error) func(*cobra.Command, []string) error {
	return withDBPing(true, f)
}

// withDBPing is withDB; without ping, f runs whether the server answers
// or not.
func withDBPing(ping bool, f func(cmd *cobra.Command, args []string, d *database) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		d, err := openDB(cmd, ping)
		if err != nil {
			return err
		}
		defer d.close(cmd.Context())
		return f(cmd, args, d)
	}
}

// printJSON writes v as indented JSON, with the characters a terminal
// would act on that JSON encoders leave raw (DEL, C1, bidirectional
// formatting) written as \u escapes (human.EscapeJSON): the same values
// for a script, nothing for a terminal to act on.
func printJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(human.EscapeJSON(b.Bytes()))
	return err
}

// extJSON turns a document into a value that encodes as MongoDB's relaxed
// extended JSON ($oid, $date), for --json output.
func extJSON(raw bson.Raw) json.RawMessage {
	b, err := bson.MarshalExtJSON(raw, false, false)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

// row writes one row, each cell escaped (human.Escape): a tab or newline
// in a name cannot shift the columns, a control character cannot reach
// the terminal.
func (t *table) row(cols ...string) {
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = human.Escape(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// isTerminalReader reports whether r is a terminal (the process's stdin on
// a terminal).
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTerminal(f)
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// confirm asks a yes/no question on a terminal. Without a terminal it
// refuses (a usage error) unless --yes was given.
func confirm(cmd *cobra.Command, question string) error {
	if yes, _ := cmd.Flags().GetBool("yes"); yes {
		return nil
	}
	if !isTerminalReader(cmd.InOrStdin()) {
		return usagef("%s: not confirmed (stdin is not a terminal); give --yes", question)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", human.Escape(question))
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return usagef("%s: not confirmed", question)
}

// ago and statusText render for people, the same way everywhere (den/internal/human).
var (
	ago        = human.Ago
	statusText = human.Status
)

// stamp renders a time for people: local time, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

// parseTaskID reads a task id argument.
func parseTaskID(s string) (bson.ObjectID, error) {
	id, err := bson.ObjectIDFromHex(strings.TrimSpace(s))
	if err != nil {
		return id, usagef("task id %q is not a 24-digit hex ObjectId", s)
	}
	return id, nil
}

// takeCensus returns the task counts by status (the census, of only the
// given queues when some are given), at most web.counts_age old: a command
// that finds them older counts every task again, once for every command
// and page that looks meanwhile (queue.CensusTaker).
func takeCensus(cmd *cobra.Command, d *database, only ...bson.ObjectID) (*queue.Census, error) {
	ct := &queue.CensusTaker{Store: d.store, By: "den " + cmd.Name()}
	return ct.Take(cmd.Context(), d.cfg.WebCountsAge, only...)
}
