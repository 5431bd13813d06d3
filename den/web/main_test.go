package web_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/den/web"
)

// The test binary plays the task runner of the nodes the tests start, so
// that the command plugin runs real programs.
func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{"task-runner": nodetest.RunnerRole})
}

// startNode runs a real node named name on db until the test ends
// (nodetest.Start): its runners are this test binary, and the command
// plugin may run /bin/sh and /usr/bin.
func startNode(t *testing.T, db *mongo.Database, name string) {
	t.Helper()
	nodetest.Start(t, db, name)
}

// serve starts the status page on db with token (empty: read-only).
func serve(t *testing.T, db *mongo.Database, token string) *httptest.Server {
	t.Helper()
	h, err := web.New(web.Options{DB: db, Log: zaptest.NewLogger(t), Token: token, Refresh: 2 * time.Second, CountsAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
