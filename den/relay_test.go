package den_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/plugins/demo"
)

// With the relay (the default), a task opens no server connection and
// sends no handshake or endSessions: its runner's commands go over the
// node's own connections. Counted at the wire by the embedded server's
// proxy.
func TestRelayedTasksOpenNoServerConnections(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	ctx, cancel := context.WithCancel(dentest.Context(t))
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// The node's pool is filled up front and its server monitor is quiet,
	// so that whatever the wire sees during the tasks is the tasks' doing.
	const pool = 8
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetMinPoolSize(pool).SetHeartbeatInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("relay")
	qid := dentest.Queue(t, db, "demo", demo.Name, 2, "fifo")
	runnerLog := filepath.Join(t.TempDir(), "runners.log")
	cfg := runnerConfig("relayed", srv.URI(), db.Name(), runnerLog)
	// The node's own hello for the server's time (once a minute) would be
	// counted with the runners' handshakes: not within this test.
	cfg.ClockEvery = time.Hour
	node, err := den.New(cfg, db, plugins.Default(), zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		node.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	demoTasks := func(n int) []bson.D {
		out := make([]bson.D, n)
		for i := range out {
			out[i] = bson.D{{Key: "commands", Value: "a"}}
		}
		return out
	}
	finished := func(n int64) func() bool {
		return func() bool { return dentest.CountTasks(t, db, bson.D{{Key: "status", Value: 1}}) == n }
	}
	// Warm up: the relay's one upstream hello, the pool filled.
	dentest.Tasks(t, db, qid, demoTasks(2)...)
	dentest.Eventually(t, 5*time.Minute, "2 warm-up tasks done", finished(2))
	dentest.Eventually(t, time.Minute, "the node's pool filled", func() bool { return srv.Stats().Connections >= pool+1 })

	// The warm-up's handshakes upstream (the relay's one hello, and one
	// more a few seconds after the first tasks) are over once no hello
	// has come for 5 s.
	settled, last := time.Now(), srv.Stats().Commands["hello"]
	dentest.Eventually(t, time.Minute, "the warm-up's handshakes over", func() bool {
		if n := srv.Stats().Commands["hello"]; n != last {
			settled, last = time.Now(), n
		}
		return time.Since(settled) >= 5*time.Second
	})
	const tasks = 6
	before := srv.Stats()
	dentest.Tasks(t, db, qid, demoTasks(tasks)...)
	dentest.Eventually(t, 5*time.Minute, "the tasks done", finished(2+tasks))
	got := srv.Stats().Sub(before)
	t.Logf("%d tasks: %d connections, commands %v", tasks, got.Connections, got.Commands)
	if got.Connections != 0 {
		t.Errorf("%d tasks opened %d server connections, want 0", tasks, got.Connections)
	}
	for _, name := range []string{"isMaster", "ismaster", "hello", "endSessions", "saslStart"} {
		if n := got.Commands[name]; n != 0 {
			t.Errorf("%d tasks sent %d %s commands to the server, want 0", tasks, n, name)
		}
	}
	// The tasks' own work (the Demo plugin's reports, written as upserts)
	// went through the relay too.
	if n, err := db.Collection("reports").CountDocuments(dentest.Context(t), bson.D{}); err != nil || n < 2+tasks {
		t.Errorf("%d reports written (%v), want at least %d (the tasks' own work)", n, err, 2+tasks)
	}
	if b, _ := os.ReadFile(runnerLog); strings.Contains(string(b), "connects to MongoDB directly") {
		t.Errorf("a runner fell back to a direct connection:\n%s", b)
	}
}

// A program a task runs cannot reach the relay's control channel: none of
// its descriptors is a socket, and the runner's numbers are closed.
func TestTaskProgramsDoNotInheritTheRelay(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: `for fd in 3 4 5 6 7 8 9; do if { true >&$fd; } 2>/dev/null; then echo "open $fd"; fi; done; ls -l /proc/$$/fd`}})[0]
	startNode(t, db, "n")
	raw := dentest.WaitStatus(t, db, id, 1)
	out := raw.Lookup("stdout").StringValue()
	if !strings.Contains(out, "0 ->") {
		t.Fatalf("the program did not list its descriptors: %q (stderr %q)", out, raw.Lookup("stderr"))
	}
	if strings.Contains(out, "open ") || strings.Contains(out, "socket:") {
		t.Fatalf("the task's program holds a descriptor it should not:\n%s", out)
	}
}

// A node that stops while a task runs does not stop the task: its runner
// goes on with a direct connection and records the result.
func TestRelayedTaskOutlivesItsNode(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo")
	gate := filepath.Join(t.TempDir(), "gate")
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: `echo started; while [ ! -e ` + gate + ` ]; do sleep 0.1; done; echo done`}})[0]
	runnerLog := filepath.Join(t.TempDir(), "runners.log")
	node := startNode(t, db, "leaver", func(c *den.Config) { c.Runner.Log = runnerLog })
	dentest.WaitStatus(t, db, id, 0)
	node.Stop() // the relay closes with it
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	raw := dentest.WaitStatus(t, db, id, 1)
	if out := raw.Lookup("stdout").StringValue(); out != "started\ndone\n" {
		t.Errorf("stdout %q", out)
	}
	b, _ := os.ReadFile(runnerLog)
	if !strings.Contains(string(b), "connects to MongoDB directly") {
		t.Errorf("the runner did not say it switched to a direct connection:\n%s", b)
	}
}

// waitSleeping waits until n Test::Sleep runs of queue qid have made the
// writes they make before sleeping, so that a node killed now has no
// command of theirs in flight: through the relay, a command the node was
// running when it died fails once (its outcome is unknown).
func waitSleeping(t *testing.T, db *mongo.Database, qid bson.ObjectID, n int64) {
	t.Helper()
	dentest.Eventually(t, 2*time.Minute, fmt.Sprintf("%d runs sleeping", n), func() bool {
		raw, err := db.Collection("concurrency").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: "queue:" + qid.Hex()}}).Raw()
		if err != nil {
			return false
		}
		now, _ := raw.Lookup("now").AsInt64OK()
		peak, _ := raw.Lookup("peak").AsInt64OK()
		return now >= n && peak >= n
	})
}
