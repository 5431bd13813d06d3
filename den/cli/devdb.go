package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/devdb"
)

// defaultDataDir is where `den dev` keeps its database between runs.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "den", "dev")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "den", "dev")
	}
	return ".den-dev"
}

func newDevDBCmd() *cobra.Command {
	var dir, listen, engine string
	var eof bool
	cmd := &cobra.Command{
		Use:   "devdb",
		Short: "Serve only the embedded development database",
		Long: `Serve the embedded MongoDB-compatible development database (FerretDB on
PostgreSQL, or SQLite where PostgreSQL is not installed, made atomic by a
proxy running one command at a time per database) without a node. The
first line on stdout is its mongodb:// URI. It is what the test suite runs.
It locks its --data directory: a second den devdb (or den dev) on the same
directory says which process holds it and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if eof {
				// Stop when the parent closes our stdin (or dies).
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				go func() {
					io.Copy(io.Discard, os.Stdin)
					cancel()
				}()
			}
			srv, err := devdb.Start(ctx, devdb.Config{Dir: dir, Listen: listen, Log: os.Stderr, Engine: engine})
			if err != nil {
				return err
			}
			fmt.Println(srv.URI())
			if srv.Note() != "" {
				fmt.Fprintln(os.Stderr, "den devdb:", srv.Note())
			}
			<-srv.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "data", defaultDataDir(), "directory for the database files")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:27017", "address to listen on (port 0: any free port)")
	addEngineFlag(cmd, &engine)
	cmd.Flags().BoolVar(&eof, "exit-on-stdin-eof", false, "stop when stdin is closed (for test harnesses)")
	return cmd
}

// addEngineFlag adds --engine, the development database's storage engine.
func addEngineFlag(cmd *cobra.Command, engine *string) {
	cmd.Flags().StringVar(engine, "engine", "", `storage engine: postgresql (FerretDB on a PostgreSQL cluster in --data; needs PostgreSQL's
programs, e.g. Debian's postgresql package), sqlite (nothing to install; slows down past a few
thousand tasks), or empty: the one --data already holds, else postgresql where installed, else sqlite`)
}
