package web_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/web"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
)

// The test binary plays the task runner of the nodes the tests start, so
// that the command plugin runs real programs.
func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{"task-runner": func() int {
		return runner.Process(plugins.Default(), func(runner.Spec) (*zap.Logger, error) { return zap.NewDevelopment() })
	}})
}

// startNode runs a real node named name on db until the test ends; its
// runners are this test binary, and the command plugin may run /bin/sh
// and /usr/bin.
func startNode(t *testing.T, db *mongo.Database, name string) {
	t.Helper()
	dentest.EndToEnd(t)
	exe, _ := os.Executable()
	policy, _ := json.Marshal(command.Policy{Enabled: true, Allow: []string{"/bin/sh", "/usr/bin/"}, Shell: true, Env: []string{"PATH"}, Landlock: command.LandlockOptional})
	cfg := den.Config{
		Name: name, Interval: 100 * time.Millisecond, URI: dentest.URI(), Database: db.Name(),
		SweepEvery: 200 * time.Millisecond, RescueEvery: 200 * time.Millisecond,
		RefreshEvery: 200 * time.Millisecond, RecheckEvery: 200 * time.Millisecond,
		PluginConfig: map[string]json.RawMessage{command.Name: policy},
		Runner:       den.RunnerCommand{Path: exe, Env: []string{dentest.EnvRole + "=task-runner"}, Log: filepath.Join(t.TempDir(), "runners.log")},
	}
	node, err := den.New(cfg, db, plugins.Default(), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := node.Run(ctx); err != nil {
			t.Errorf("node %s: %v", name, err)
		}
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { cancel(); <-done }) })
}

// serve starts the status page on db with token (empty: read-only).
func serve(t *testing.T, db *mongo.Database, token string) *httptest.Server {
	t.Helper()
	h, err := web.New(web.Options{DB: db, Log: zaptest.NewLogger(t), Token: token, Refresh: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// waitStatus waits until task id has status st and returns it.
func waitStatus(t *testing.T, db *mongo.Database, id bson.ObjectID, st int) bson.Raw {
	t.Helper()
	var raw bson.Raw
	dentest.Eventually(t, 2*time.Minute, "task "+id.Hex()+" reaching its status", func() bool {
		raw = dentest.Task(t, db, id)
		s, ok := raw.Lookup("status").AsInt64OK()
		return ok && int(s) == st
	})
	return raw
}
