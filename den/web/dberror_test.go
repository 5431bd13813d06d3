package web_test

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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
