package devdb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// Engines FerretDB can keep the data in.
const (
	// EnginePostgreSQL is FerretDB's postgresql handler on a PostgreSQL
	// cluster of the data directory's own (postgres.go), with GIN indexes
	// that serve the queries FerretDB pushes down (pgindexes.go): claims,
	// starts and finishes stay index lookups as finished tasks pile up.
	EnginePostgreSQL = "postgresql"
	// EngineSQLite is FerretDB's sqlite handler: pure Go, nothing to
	// install, but every query decodes the whole collection, so each task
	// costs more than the one before (docs/performance.md).
	EngineSQLite = "sqlite"
)

// Config says where the database keeps its data and listens.
type Config struct {
	// Dir holds the data; it is created if missing and survives restarts.
	Dir string
	// Listen is the address clients connect to; default 127.0.0.1:0 (a free
	// port).
	Listen string
	// Log receives FerretDB's own log at Error level (it logs every error
	// reply at Warn, which a node provokes on purpose); nil discards it.
	// PostgreSQL's own log is the file postgresql.log in Dir.
	Log io.Writer
	// Engine is EnginePostgreSQL, EngineSQLite, or "" for the engine whose
	// data Dir already holds, else PostgreSQL where its programs are
	// found (Server.Note says when it was not), else SQLite.
	Engine string
	// PostgresBin is the directory of PostgreSQL's initdb and postgres;
	// empty looks in the usual places (FindPostgres).
	PostgresBin string
	// NoTwins leaves out the PostgreSQL engine's GIN indexes (pgindexes.go),
	// and its fast paths with their indexes and tallies (fastpath.go), for
	// measuring what they do (BenchmarkEngines in queue).
	NoTwins bool
	// TaskUsers are the users tasks of a node on this database may run
	// as (command.user): the PostgreSQL cluster never runs as one of
	// them (Start fails saying so), nor as root or nobody.
	TaskUsers []string
	// pgSettings are more -c settings for PostgreSQL (tests: auto_explain).
	pgSettings []string
	// pgRestartFor is how long a PostgreSQL server that died is started
	// again before the server gives up (Err); default pgRestartFor.
	pgRestartFor time.Duration
}

// Server is a running embedded database. Clients reach it on one TCP
// port, the proxy's (URI); FerretDB listens only on a unix socket in a
// directory of mode 0700, den's user's (DirectURI), and PostgreSQL only
// on one in a directory of its own user's.
type Server struct {
	uri    string
	direct string
	engine string
	note   string
	addr   net.Addr
	pg     *cluster // the PostgreSQL engine's cluster; nil for SQLite
	proxy  *proxy
	done   chan struct{}
	err    error // why it stopped on its own; set before done is closed
}

// URI is the mongodb:// URI clients use.
func (s *Server) URI() string { return s.uri }

// DirectURI reaches FerretDB without the proxy, on its unix socket, which
// only den's user (and root) may connect to: its commands are not
// counted in Stats, and are not serialized with the others, so it is only
// for inserts and reads that need no atomicity (a benchmark's own
// bookkeeping).
func (s *Server) DirectURI() string { return s.direct }

// Addr is the address clients connect to (URI's host and port).
func (s *Server) Addr() net.Addr { return s.addr }

// Err says why the server stopped on its own (its PostgreSQL died and
// could not be started again), once Done is closed; nil when it stopped
// because its context ended.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Engine is the engine serving the data: EnginePostgreSQL or EngineSQLite.
func (s *Server) Engine() string { return s.engine }

// Note says why Config.Engine "" chose SQLite, for the user: "" when it
// chose PostgreSQL or was told which engine to use.
func (s *Server) Note() string { return s.note }

// Stats returns what clients have sent through URI so far.
func (s *Server) Stats() Stats { return s.proxy.snapshot() }

// ferretNew serializes ferretdb.New, which writes a package variable of
// FerretDB's (its version's package name) each time: two servers of one
// process starting at once raced on it.
var ferretNew sync.Mutex

// newFerretDB is ferretdb.New, one at a time.
func newFerretDB(cfg *ferretdb.Config) (*ferretdb.FerretDB, error) {
	ferretNew.Lock()
	defer ferretNew.Unlock()
	return ferretdb.New(cfg)
}

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Start starts the database; it runs until ctx is done. It holds an
// exclusive lock on the data directory while it runs: when another process
// serves the directory, Start returns a *LockedError naming it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	dir, unlock, err := openDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	var undo []func() // what to release, last first, when Start fails
	fail := func(err error) (*Server, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, err
	}
	undo = append(undo, unlock)
	listen := listenAddress(cfg.Listen)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fail(fmt.Errorf("devdb: listen on %s: %w", listen, err))
	}
	undo = append(undo, func() { ln.Close() })
	logOut := cfg.Log
	if logOut == nil {
		logOut = io.Discard
	}
	engine, bin, note, err := chooseEngine(dir, cfg)
	if err != nil {
		return fail(err)
	}
	sockDir, err := os.MkdirTemp("", "den-ferretdb-")
	if err != nil {
		return fail(fmt.Errorf("devdb: make FerretDB's socket directory: %w", err))
	}
	undo = append(undo, func() { os.RemoveAll(sockDir) })
	s := &Server{done: make(chan struct{}), engine: engine, note: note, addr: ln.Addr()}
	fcfg := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{Unix: filepath.Join(sockDir, "ferretdb.sock")},
		Handler:  engine,
		Logger:   slog.New(newServerLog(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelError}))),
	}
	ferret := newFerret(fcfg)
	pg, err := startBackend(ctx, engine, dir, bin, cfg, logOut, fcfg, ferret.renew)
	if err != nil {
		return fail(err)
	}
	if pg != nil {
		undo = append(undo, func() { pg.stop() })
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := ferret.start(ctx); err != nil {
		cancel()
		return fail(err)
	}
	undo = append(undo, func() { cancel(); ferret.stop() })
	s.uri = "mongodb://" + ln.Addr().String() + "/"
	s.direct = "mongodb://" + url.PathEscape(fcfg.Listener.Unix) + "/"
	p := newProxy(ln, "unix", fcfg.Listener.Unix)
	p.logOut = logOut
	s.proxy, s.pg = p, pg
	var twins *twinKeeper
	if pg != nil {
		p.backend = pg
		if !cfg.NoTwins {
			if twins, err = startTwins(ctx, pg.url(pgDatabase), p, logOut); err != nil {
				return fail(err)
			}
			if p.fast, err = newFastPaths(ctx, pg.url(pgDatabase)); err != nil {
				return fail(err)
			}
			undo = append(undo, p.fast.close)
		}
	}
	go s.serve(ctx, cancel, p, twins, ferret, func() {
		if pg != nil {
			pg.stop()
		}
		os.RemoveAll(sockDir)
		unlock() // after the engine has closed its files
	})
	return s, nil
}

// serve runs the proxy until ctx is done, or the engine fails for good
// (then Err says why), and then stops the rest, release last.
func (s *Server) serve(ctx context.Context, cancel context.CancelFunc, p *proxy, twins *twinKeeper, ferret *ferret, release func()) {
	defer close(s.done)
	defer func() {
		release()
		if s.pg != nil {
			select {
			case <-s.pg.failed: // written before failed was closed
				s.err = s.pg.err
			default:
			}
		}
	}()
	defer cancel()
	if s.pg != nil {
		go func() {
			select {
			case <-s.pg.failed:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	p.serve(ctx)
	if twins != nil {
		twins.wait()
	}
	if p.fast != nil {
		p.fast.close()
	}
	ferret.stop()
}

// openDir creates the data directory dir when it is missing and locks
// it: one server per directory. unlock gives it up.
func openDir(dir string) (abs string, unlock func(), err error) {
	if dir == "" {
		return "", nil, fmt.Errorf("devdb: no data directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("devdb: create data directory: %w", err)
	}
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("devdb: data directory: %w", err)
	}
	unlock, err = lockDir(abs)
	if err != nil {
		return "", nil, err
	}
	return abs, unlock, nil
}

// listenAddress is where the server listens: listen, else a free port on
// the loopback address.
func listenAddress(listen string) string {
	if listen == "" {
		return "127.0.0.1:0"
	}
	return listen
}

// sqliteURL is FerretDB's SQLite URL for the data directory dir.
// synchronous(normal): in WAL mode a commit no longer waits for an fsync;
// an application crash loses nothing, a power loss may lose the last
// commits. Right for a development database, and it keeps tests fast on
// slow disks.
func sqliteURL(dir string) string {
	return "file:" + strings.TrimSuffix(dir, "/") + "/?_pragma=synchronous(normal)"
}

// startBackend points fcfg at the engine's storage: a PostgreSQL cluster
// it starts in dir (returned, for stopping), or SQLite files in dir.
// restarted is called each time the cluster's server has been started
// again, before commands reach it (ferret.go).
func startBackend(ctx context.Context, engine, dir, bin string, cfg Config, log io.Writer, fcfg *ferretdb.Config, restarted func() error) (*cluster, error) {
	if engine != EnginePostgreSQL {
		fcfg.SQLiteURL = sqliteURL(dir)
		return nil, nil
	}
	pg, err := startCluster(ctx, dir, bin, clusterOptions{settings: cfg.pgSettings, taskUsers: cfg.TaskUsers, log: log, restartFor: cfg.pgRestartFor, restarted: restarted})
	if err != nil {
		return nil, err
	}
	fcfg.PostgreSQLURL = pg.url(pgDatabase)
	return pg, nil
}

// chooseEngine picks the engine for dir (Config.Engine), and for
// PostgreSQL the directory of its programs. note says why "" chose SQLite.
func chooseEngine(dir string, cfg Config) (engine, bin, note string, err error) {
	switch cfg.Engine {
	case EngineSQLite:
		return EngineSQLite, "", "", nil
	case EnginePostgreSQL:
		bin, err := FindPostgres(cfg.PostgresBin)
		if err != nil {
			return "", "", "", err
		}
		return EnginePostgreSQL, bin, "", nil
	case "":
	default:
		return "", "", "", fmt.Errorf("devdb: unknown engine %q (want %s or %s)", cfg.Engine, EnginePostgreSQL, EngineSQLite)
	}
	if _, err := os.Stat(filepath.Join(dir, pgSubdir, "PG_VERSION")); err != nil && hasSQLite(dir) {
		return EngineSQLite, "", fmt.Sprintf("%s holds a SQLite database of an earlier den, served as it is; "+
			"it slows down as tasks pile up (a few thousand: docs/performance.md). --engine postgresql with another --data starts a faster one", dir), nil
	}
	bin, err = FindPostgres(cfg.PostgresBin)
	if err != nil {
		return EngineSQLite, "", fmt.Sprintf("%v; serving with SQLite instead, which slows down as tasks pile up (a few thousand: docs/performance.md)",
			strings.TrimPrefix(err.Error(), "devdb: ")), nil
	}
	return EnginePostgreSQL, bin, "", nil
}

// hasSQLite reports whether dir holds FerretDB's SQLite files.
func hasSQLite(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.sqlite"))
	return len(m) > 0
}
