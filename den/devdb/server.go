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

// Config says where the database keeps its data and listens.
type Config struct {
	// Dir holds the SQLite files; it is created if missing and survives
	// restarts.
	Dir string
	// Listen is the address clients connect to; default 127.0.0.1:0 (a free
	// port).
	Listen string
	// Log receives FerretDB's own log at Error level (it logs every error
	// reply at Warn, which a node provokes on purpose); nil discards it.
	Log io.Writer
}

// Server is a running embedded database.
type Server struct {
	uri    string
	direct string
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

// Stats returns what clients have sent through URI so far.
func (s *Server) Stats() Stats { return s.proxy.snapshot() }

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Start starts the database; it runs until ctx is done. It holds an
// exclusive lock on the data directory while it runs: when another process
// serves the directory, Start returns a *LockedError naming it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("devdb: no data directory")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("devdb: create data directory: %w", err)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("devdb: data directory: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("devdb: listen on %s: %w", listen, err)
	}
	logOut := cfg.Log
	if logOut == nil {
		logOut = io.Discard
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:  "sqlite",
		// synchronous(normal): in WAL mode a commit no longer waits for an
		// fsync; an application crash loses nothing, a power loss may
		// lose the last commits. Right for a development database, and
		// it keeps tests fast on slow disks.
		SQLiteURL: "file:" + strings.TrimSuffix(dir, "/") + "/?_pragma=synchronous(normal)",
		Logger:    slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		ln.Close()
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
	s := &Server{done: make(chan struct{})}
	host := ln.Addr().String()
	s.uri = "mongodb://" + host + "/"
	p := newProxy(ln, upstream)
	p.logOut = logOut
	s.proxy, s.direct = p, "mongodb://"+upstream+"/"
	go func() {
		defer close(s.done)
		defer unlock() // after FerretDB has closed its SQLite files
		defer cancel()
		p.serve(ctx)
		<-ferretDone
	}()
	return s, nil
}
