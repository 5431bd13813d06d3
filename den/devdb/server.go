package devdb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

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
	// for measuring what they do (BenchmarkEngines in queue).
	NoTwins bool
	// pgSettings are more -c settings for PostgreSQL (tests: auto_explain).
	pgSettings []string
}

// Server is a running embedded database.
type Server struct {
	uri    string
	direct string
	engine string
	note   string
	pg     *cluster // the PostgreSQL engine's cluster; nil for SQLite
	proxy  *proxy
	done   chan struct{}
}

// URI is the mongodb:// URI clients use.
func (s *Server) URI() string { return s.uri }

// DirectURI reaches FerretDB without the proxy: its commands are not
// counted in Stats, and are not serialized with the others, so it is only
// for inserts and reads that need no atomicity (a benchmark's own
// bookkeeping).
func (s *Server) DirectURI() string { return s.direct }

// Engine is the engine serving the data: EnginePostgreSQL or EngineSQLite.
func (s *Server) Engine() string { return s.engine }

// Note says why Config.Engine "" chose SQLite, for the user: "" when it
// chose PostgreSQL or was told which engine to use.
func (s *Server) Note() string { return s.note }

// Stats returns what clients have sent through URI so far.
func (s *Server) Stats() Stats { return s.proxy.snapshot() }

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
	listen := listenAddress(cfg.Listen)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("devdb: listen on %s: %w", listen, err)
	}
	logOut := cfg.Log
	if logOut == nil {
		logOut = io.Discard
	}
	engine, bin, note, err := chooseEngine(dir, cfg)
	if err != nil {
		ln.Close()
		unlock()
		return nil, err
	}
	s := &Server{done: make(chan struct{}), engine: engine, note: note}
	fcfg := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:  engine,
		Logger:   slog.New(newServerLog(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelError}))),
	}
	var twins *twinKeeper
	pg, err := startBackend(ctx, engine, dir, bin, cfg, fcfg)
	if err != nil {
		ln.Close()
		unlock()
		return nil, err
	}
	stopEngine := func() {
		if pg != nil {
			pg.stop()
		}
	}
	f, err := ferretdb.New(fcfg)
	if err != nil {
		ln.Close()
		stopEngine()
		unlock()
		return nil, fmt.Errorf("devdb: start FerretDB: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ferretDone := make(chan struct{})
	go func() {
		defer close(ferretDone)
		f.Run(ctx)
	}()
	upstream := strings.TrimSuffix(strings.TrimPrefix(f.MongoDBURI(), "mongodb://"), "/")
	host := ln.Addr().String()
	s.uri = "mongodb://" + host + "/"
	p := newProxy(ln, upstream)
	p.logOut = logOut
	s.proxy, s.direct, s.pg = p, "mongodb://"+upstream+"/", pg
	if pg != nil && !cfg.NoTwins {
		twins, err = startTwins(ctx, pg.url(pgDatabase), p, logOut)
		if err != nil {
			cancel()
			<-ferretDone
			ln.Close()
			stopEngine()
			unlock()
			return nil, err
		}
	}
	go func() {
		defer close(s.done)
		defer unlock() // after the engine has closed its files
		defer stopEngine()
		defer cancel()
		p.serve(ctx)
		if twins != nil {
			twins.wait()
		}
		<-ferretDone
	}()
	return s, nil
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
func startBackend(ctx context.Context, engine, dir, bin string, cfg Config, fcfg *ferretdb.Config) (*cluster, error) {
	if engine != EnginePostgreSQL {
		fcfg.SQLiteURL = sqliteURL(dir)
		return nil, nil
	}
	pg, err := startCluster(ctx, dir, bin, cfg.pgSettings...)
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
