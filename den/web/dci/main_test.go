package dci_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/den/web"
	"github.com/den-project/den/den/web/dci"
	_ "github.com/den-project/den/plugins/demo" // the nodes the tests start run Demo tasks
)

// The test binary plays the task runner of the nodes the tests start.
func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{"task-runner": nodetest.RunnerRole})
}

// testToken is web.token in these tests.
const testToken = "f3b1c6a2d9e04b7c8a5d2e1f6b9c0a47"

// serve starts the API on db with token (empty: read-only), Demo as a
// configured plugin, and the given options' tweaks.
func serve(t *testing.T, db *mongo.Database, token string, tweak ...func(*dci.Options)) *httptest.Server {
	t.Helper()
	log := zaptest.NewLogger(t)
	guard, err := web.NewGuard(web.GuardOptions{Token: token, Log: log, Sleep: func(context.Context, time.Duration) {}})
	if err != nil {
		t.Fatal(err)
	}
	o := dci.Options{DB: db, Guard: guard, Log: log, Plugins: []string{"Disbatch::Plugin::Demo"}, CountsAge: -1}
	for _, f := range tweak {
		f(&o)
	}
	h, err := dci.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
