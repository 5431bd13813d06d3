package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

func newDevCmd() *cobra.Command {
	var dir, listen, engine string
	var tryCommand bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a node on an embedded development database (no MongoDB needed)",
		Long: `Start the embedded development database (data kept in --data between runs),
print its mongodb:// URI, create a demo queue when there is no queue, and run
a node on it until Ctrl-C. Insert tasks with mongosh or any driver. Its
port asks for no credentials: every local user can connect to it, as to a
default MongoDB; nothing else of it listens on a port, and its PostgreSQL
runs as your user, or as den-devdb for root (never root or nobody). One
process at a time serves a data directory: a second den dev (or den devdb)
on the same --data says which process holds it and exits 1. On Ctrl-C, den
dev waits up to 10 seconds for running tasks to finish, stops the rest (they
record that they were stopped), and then stops the database.

--command turns the command plugin on to try it, unless the configuration
turns it on already (then its policy stands): it may run only a few harmless
programs (echo, printf, sleep, true, false, date, seq; no shell), as the
user nobody where den may change user (run as root), else as your own user;
Landlock enforces it where the kernel has it. den dev creates a queue
"command" for it when there is none, and prints a task to try.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load("", cmd.Flags())
			if err != nil {
				return usageError{err} // a value refused: exit 2, as every command
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			dbCtx, stopDB := context.WithCancel(context.Background())
			defer stopDB()
			// The database's PostgreSQL never runs as a user tasks may run as.
			dbCfg := devdb.Config{Dir: dir, Listen: listen, Log: os.Stderr, Engine: engine, TaskUsers: []string{cfg.Command.User}}
			if tryCommand {
				dbCfg.TaskUsers = append(dbCfg.TaskUsers, devCommandUser)
			}
			srv, err := devdb.Start(dbCtx, dbCfg)
			var inUse *devdb.LockedError
			if err != nil && !errors.As(err, &inUse) && !cmd.Flags().Changed("listen") {
				// The default port is taken (a real mongod?): use any free one.
				dbCfg.Listen = "127.0.0.1:0"
				srv, err = devdb.Start(dbCtx, dbCfg)
			}
			if err != nil {
				return err
			}
			// den dev ends once the database has stopped, PostgreSQL's
			// processes with it: a script that removes --data after den dev
			// exits, or starts it again, finds nothing of it still running.
			defer func() { stopDB(); <-srv.Done() }()
			// A database that stops on its own (its PostgreSQL died and
			// could not be started again) stops the node, and den dev
			// exits 1 saying why.
			ctx, stopNode := context.WithCancel(ctx)
			defer stopNode()
			go func() {
				select {
				case <-srv.Done():
					stopNode()
				case <-ctx.Done():
				}
			}()
			cfg.MongoURI, cfg.URI = srv.URI(), srv.URI()
			qid, created, err := ensureDemoQueue(ctx, srv.URI(), cfg.Database)
			if err != nil {
				return err
			}
			printDevBanner(srv, dir, cfg.Database, qid, created)
			if tryCommand {
				if err := devCommand(ctx, &cfg, srv.URI()); err != nil {
					return err
				}
			}
			// The database stops with den dev: its runners get 10 seconds to
			// finish, then are stopped and record that, before it does.
			err = runNode(ctx, cfg, devDrain, srv.Collector())
			if dbErr := srv.Err(); dbErr != nil {
				return fmt.Errorf("den dev: the database stopped: %w", dbErr)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "data", defaultDataDir(), "directory for the database files (kept between runs)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:27017", "address of the database (port 0: any free port)")
	cmd.Flags().BoolVar(&tryCommand, "command", false, "turn the command plugin on to try it: a few harmless programs (echo, sleep, ...), no shell, as user nobody")
	addEngineFlag(cmd, &engine)
	config.AddFlags(cmd.Flags())
	return cmd
}

// devDrain is how long den dev waits for running tasks when it stops.
const devDrain = 10 * time.Second

// ensureDemoQueue creates a queue "demo" for Disbatch::Plugin::Demo when
// the database has no queue, and returns the id of the demo queue (zero if
// there are other queues).
func ensureDemoQueue(ctx context.Context, uri, database string) (id string, created bool, err error) {
	client, err := connect(uri, "den dev")
	if err != nil {
		return "", false, err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store := queue.NewStore(client.Database(database))
	n, err := store.CountQueues(cctx)
	if err != nil {
		return "", false, fmt.Errorf("dev database: %w", err)
	}
	if n > 0 {
		return "", false, nil
	}
	oid, err := store.CreateQueue(cctx, "demo", demo.Name, 2, queue.SortFIFO)
	if err != nil {
		return "", false, fmt.Errorf("dev database: %w", err)
	}
	return oid.Hex(), true, nil
}

func printDevBanner(srv *devdb.Server, dir, database, qid string, created bool) {
	uri := srv.URI()
	fmt.Printf("\nden dev: database %s at %s (data in %s, %s)\n", database, uri, dir, srv.Engine())
	fmt.Printf("den dev: %s\n", reachNote(srv.Addr()))
	if srv.Note() != "" {
		fmt.Printf("den dev: %s\n", srv.Note())
	}
	if created {
		fmt.Printf("den dev: created queue \"demo\" (%s) for %s\n", qid, demo.Name)
	}
	fmt.Printf(`den dev: add a task from another terminal, for example:

  mongosh '%s%s' --eval '
    const q = db.queues.findOne({name: "demo"});
    db.tasks.insertOne({queue: q._id, status: -2, node: -1, parameters: {commands: "ab"},
                        ctime: new Date(), mtime: new Date(), stdout: null, stderr: null});
    db.queues.updateOne({_id: q._id}, {$inc: {count_total: 1, count_todo: 1}})'

`, uri, database)
}
