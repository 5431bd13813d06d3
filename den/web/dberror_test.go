package web_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/den/web"
)

// With the database unreachable, every page answers 503 with the banner,
// never the driver's error, and the outage is logged once, not on every
// refresh.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/").SetServerSelectionTimeout(300 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(t.Context())
	core, logs := observer.New(zapcore.InfoLevel)
	h, err := web.New(web.Options{DB: c.Database("x"), Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 3 {
		for _, path := range []string{"/", "/tasks", "/tasks?status=queued", "/schedules", "/login"} {
			code, body := get(t, client(nil), srv.URL+path)
			if code != 503 || !strings.Contains(body, "Database unreachable since") || !strings.Contains(body, "retrying") {
				t.Errorf("%s with the database down: %d, want 503 with the banner:\n%s", path, code, body)
			}
			for _, raw := range []string{"server selection", "connection refused", "list queues", addr} {
				if strings.Contains(body, raw) {
					t.Errorf("%s with the database down shows the driver's error (%q):\n%s", path, raw, body)
				}
			}
		}
	}
	if n := logs.FilterMessageSnippet("database unreachable").Len(); n != 1 {
		t.Errorf("the outage was logged %d times in 15 requests, want once", n)
	}
}

// den dev's database with its PostgreSQL dead and unable to start again
// (its program refuses, as a server on a full disk does): every page
// answers 503 with the banner, not 500 with FerretDB's error; once
// PostgreSQL may start, den dev has it back and the pages work again.
// Red on main: 500, "InternalError ... failed to connect".
func TestDevPostgreSQLDownAnswers503(t *testing.T) {
	t.Parallel()
	real, err := devdb.FindPostgres("")
	if err != nil {
		t.Skipf("PostgreSQL is not installed: %v", err)
	}
	bin, block := blockablePostgres(t, real)
	dir := t.TempDir()
	dbLog := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	db, err := devdb.Start(ctx, devdb.Config{Dir: dir, Engine: devdb.EnginePostgreSQL, PostgresBin: bin, Log: dbLog})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() { cancel(); <-db.Done() }()
	c, err := mongo.Connect(options.Client().ApplyURI(db.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	h, err := web.New(web.Options{DB: c.Database("x"), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, body := get(t, client(nil), srv.URL+"/"); code != 200 {
		t.Fatalf("/ with den dev's database up: %d\n%s", code, body)
	}
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, "postgresql", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pg, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err := syscall.Kill(pg, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	dentest.Eventually(t, 10*time.Second, "den dev's database noticing its PostgreSQL died", func() bool {
		return strings.Contains(dbLog.String(), "restarting it")
	})
	for _, path := range []string{"/", "/tasks", "/tasks?status=queued", "/schedules"} {
		code, body := get(t, client(nil), srv.URL+path)
		if code != 503 || !strings.Contains(body, "Database unreachable since") {
			t.Errorf("%s with den dev's PostgreSQL down: %d, want 503 with the banner:\n%s", path, code, body)
		}
		if strings.Contains(body, "InternalError") || strings.Contains(body, "PGSQL") {
			t.Errorf("%s with den dev's PostgreSQL down shows the server's error:\n%s", path, body)
		}
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	dentest.Eventually(t, 20*time.Second, "the page once PostgreSQL may start", func() bool {
		code, _ := get(t, client(nil), srv.URL+"/")
		return code == 200
	})
}

// blockablePostgres makes a directory of PostgreSQL's programs (those in
// real) whose postgres refuses to start while the file block exists.
func blockablePostgres(t *testing.T, real string) (bin, block string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "den-pgbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the cluster's user runs it
		t.Fatal(err)
	}
	for _, p := range []string{"initdb", "pg_ctl"} {
		if err := os.Symlink(filepath.Join(real, p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	block = filepath.Join(dir, "block")
	script := fmt.Sprintf("#!/bin/sh\nif [ -e %s ]; then echo 'blocked by the test' >&2; exit 1; fi\nexec %s \"$@\"\n", block, filepath.Join(real, "postgres"))
	if err := os.WriteFile(filepath.Join(dir, "postgres"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, block
}

// syncBuffer collects a log while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
