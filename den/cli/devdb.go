package cli

import (
	"context"
	"fmt"
	"io"
	"net"
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
proxy running one write at a time per database) without a node. The
first line on stdout is its mongodb:// URI. It is what the test suite runs.
Its port asks for no credentials: every local user can connect to it, as to
a default MongoDB (every host that reaches it, with a --listen address other
than loopback). Nothing else of it listens on a port: FerretDB and its
PostgreSQL (run as a user of its own, never root or nobody, with a password
kept in --data) only on unix sockets in directories of mode 0700. A
PostgreSQL that dies is started again; one that cannot be for 5 minutes
stops den devdb with exit status 1, saying why.
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
					_, err := io.Copy(io.Discard, os.Stdin)
					if err == nil {
						err = io.EOF
					}
					fmt.Fprintf(os.Stderr, "den devdb: stopping: reading stdin ended (%v)\n", err)
					cancel()
				}()
			}
			srv, err := devdb.Start(ctx, devdb.Config{Dir: dir, Listen: listen, Log: os.Stderr, Engine: engine})
			if err != nil {
				return err
			}
			fmt.Println(srv.URI())
			fmt.Fprintln(os.Stderr, "den devdb:", reachNote(srv.Addr()))
			if srv.Note() != "" {
				fmt.Fprintln(os.Stderr, "den devdb:", srv.Note())
			}
			<-srv.Done()
			return srv.Err() // nil when stopped by a signal or stdin's end
		},
	}
	cmd.Flags().StringVar(&dir, "data", defaultDataDir(), "directory for the database files")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:27017", "address to listen on (port 0: any free port)")
	addEngineFlag(cmd, &engine)
	cmd.Flags().BoolVar(&eof, "exit-on-stdin-eof", false, "stop when stdin is closed (for test harnesses)")
	return cmd
}

// reachNote says who can connect to the development database listening
// at addr: its port asks for no credentials, as a default MongoDB's.
func reachNote(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return fmt.Sprintf("%s asks for no credentials: every local user can connect to it, as to a default MongoDB; nothing else of the database listens on a port", addr)
	}
	return fmt.Sprintf("%s asks for no credentials: every local user, and every host that reaches it, can connect to it; nothing else of the database listens on a port", addr)
}

// addEngineFlag adds --engine, the development database's storage engine.
func addEngineFlag(cmd *cobra.Command, engine *string) {
	cmd.Flags().StringVar(engine, "engine", "", `storage engine: postgresql (FerretDB on a PostgreSQL cluster in --data; needs PostgreSQL's
programs, e.g. Debian's postgresql package), sqlite (nothing to install; slows down past a few
thousand tasks), or empty: the one --data already holds, else postgresql where installed, else sqlite`)
}
