package nodetest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/taskrunner"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
)

// RunnerRole is the task-runner role of a test binary: a task runner with
// every plugin registered in the binary (plugins.Default).
func RunnerRole() int {
	return taskrunner.Process(plugins.Default(), func(runner.Spec) (*zap.Logger, error) { return zap.NewDevelopment() })
}

// Config is a node configuration for tests: named name, on database of
// the server at uri, with the fast intervals tests need (a pass every
// 100ms, sweeps, rescues and rereads every 200ms), the command plugin
// allowed /bin/sh and /usr/bin (Landlock where the kernel has it), and
// this test binary as its task runners, logging to runnerLog. Its tasks
// share the node's /tmp and PID namespace (command.shared_tmp,
// shared_pids), so that tests can hand them files and follow their
// processes by the pids they print (den's own containment of what they
// leave is what those tests check).
func Config(name, uri, database, runnerLog string) den.Config {
	exe, _ := os.Executable()
	policy, _ := json.Marshal(command.Policy{Enabled: true, Allow: []string{"/bin/sh", "/usr/bin/"}, Shell: true, Env: []string{"PATH"}, Landlock: command.LandlockOptional, UserOptional: true, SharedTmp: true, SharedPIDs: true})
	return den.Config{
		Name:         name,
		Interval:     100 * time.Millisecond,
		URI:          uri,
		Database:     database,
		SweepEvery:   200 * time.Millisecond,
		RescueEvery:  200 * time.Millisecond,
		RefreshEvery: 200 * time.Millisecond,
		ProbeEvery:   200 * time.Millisecond,
		PluginConfig: map[string]json.RawMessage{command.Name: policy},
		Runner: den.RunnerCommand{
			Path: exe,
			Env:  []string{dentest.EnvRole + "=task-runner"},
			Log:  runnerLog,
		},
	}
}

// Node is a node a test started.
type Node struct {
	// Logs is what the node logged, from info up.
	Logs *observer.ObservedLogs
	// Stop stops the node (its runners go on, by design); the test's
	// cleanup calls it too.
	Stop func()
}

// Start runs a node named name on db (Config, changed by tweak) until the
// test ends. A test that fails shows what the node and its runners said,
// so that a CI failure is explained by its own output. It skips the test
// under -short (dentest.EndToEnd).
func Start(t testing.TB, db *mongo.Database, name string, tweak ...func(*den.Config)) Node {
	t.Helper()
	return StartClock(t, db, name, nil, tweak...)
}

// StartClock is Start with the node's host clock: now (nil: time.Now),
// as a host whose wall clock is off would have it.
func StartClock(t testing.TB, db *mongo.Database, name string, now func() time.Time, tweak ...func(*den.Config)) Node {
	t.Helper()
	dentest.EndToEnd(t)
	runnerLog := filepath.Join(t.TempDir(), "runners.log")
	cfg := Config(name, dentest.URI(), db.Name(), runnerLog)
	for _, f := range tweak {
		f(&cfg)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, e := range logs.All() {
			t.Logf("node %s: %s %s %v", name, e.Time.Format("15:04:05.000"), e.Message, e.ContextMap())
		}
		if b, err := os.ReadFile(runnerLog); err == nil {
			if len(b) > 32<<10 {
				b = b[len(b)-32<<10:]
			}
			t.Logf("runners of node %s:\n%s", name, b)
		}
	})
	node, err := den.New(cfg, db, plugins.Default(), zap.New(core), now)
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
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return Node{Logs: logs, Stop: stop}
}
