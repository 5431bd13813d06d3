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

// With the database unreachable, pages answer 500 with the error, and the
// failure is logged once, not on every refresh.
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
		code, body := get(t, client(nil), srv.URL+"/")
		if code != 500 || !strings.Contains(body, "list queues") {
			t.Errorf("overview with the database down: %d %s", code, body)
		}
	}
	if n := logs.FilterMessageSnippet("database reads failing").Len(); n != 1 {
		t.Errorf("the outage was logged %d times in 3 requests, want once", n)
	}
}
