package den_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// BenchmarkRecovery measures what the lease costs and what it buys, at the
// production intervals, for each dead_node_after in DEN_BENCH_DEAD (Go
// durations, comma-separated; default the default):
//   - beat cost: the commands a node makes with DEN_BENCH_RUNNING (default
//     20) sleeping Command tasks running, less those it makes idle, per
//     running task per second, counted at the wire by the server's proxy;
//     and the node's whole rate while they run;
//   - recovery: the node is frozen (SIGSTOP, so its runners' heartbeats,
//     which go through its relay, stop too) and a second node rescues and
//     restarts its tasks; the wait is from the frozen node's last heartbeat
//     (its document's timestamp) to each task's attempt 2 started
//     (runner.at under the second node). A frozen node is also every one
//     of its runners cut off at once: the rescue waits for the last beat of
//     each run to be dead_node_after old, as for a runner cut off alone.
//
// scripts/recovery.sh runs it and prints the figures.
func BenchmarkRecovery(b *testing.B) {
	deads := []time.Duration{queue.DefaultDeadNodeAfter}
	if s := os.Getenv("DEN_BENCH_DEAD"); s != "" {
		deads = nil
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("DEN_BENCH_DEAD: %v", err)
			}
			deads = append(deads, d)
		}
	}
	for _, dead := range deads {
		b.Run("dead_node_after="+dead.String(), func(b *testing.B) {
			for range b.N {
				benchRecovery(b, dead)
			}
		})
	}
}

func benchRecovery(b *testing.B, dead time.Duration) {
	running := 20
	if n, err := fmt.Sscan(os.Getenv("DEN_BENCH_RUNNING"), &running); n != 1 || err != nil || running <= 0 {
		running = 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv, db := benchDB(ctx, b)
	qid := dentest.Queue(b, db, "cmd", command.Name, running, "fifo")

	a := recoveryNode(b, srv.uri, srv.database, "a", dead)
	waitStartUp(b, db, "a")
	// A whole rescue period (30 s) and four beats at least, so that every
	// periodic command counts at its share. Windows of time, measured:
	// nothing to wait for.
	window := max(60*time.Second, 4*queue.BeatEvery(dead))
	before := srv.stats()
	time.Sleep(window)
	idle := srv.stats().Sub(before)

	// Each program says it runs (a file of its own) before it sleeps: its
	// runner's start, and the commands of it, are done by then.
	ran := b.TempDir()
	params := make([]bson.D, running)
	for i := range params {
		params[i] = bson.D{{Key: "shell", Value: fmt.Sprintf("touch %s; exec sleep 3600", filepath.Join(ran, strconv.Itoa(i)))}}
	}
	ids := dentest.Tasks(b, db, qid, params...)
	if _, err := db.Collection("tasks").UpdateMany(ctx, bson.D{{Key: "queue", Value: qid}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: 3}}}}); err != nil {
		b.Fatal(err)
	}
	started := bson.D{{Key: "status", Value: queue.StatusRunning}, {Key: "runner.at", Value: bson.D{{Key: "$exists", Value: true}}}}
	waitCount(b, db, started, running, 5*time.Minute)
	if !dentest.UntilBy(time.Now().Add(5*time.Minute), time.Second, func() bool {
		files, err := os.ReadDir(ran)
		return err == nil && len(files) == running
	}) {
		b.Fatalf("not all %d programs ran in 5 minutes", running)
	}
	before = srv.stats()
	time.Sleep(window) // a window of commands, measured: nothing to wait for
	busy := srv.stats().Sub(before)
	idleRate := float64(idle.Total()) / window.Seconds()
	busyRate := float64(busy.Total()) / window.Seconds()
	perTask := (busyRate - idleRate) / float64(running)
	b.Logf("idle commands over %s: %s", window, top(idle))
	b.Logf("commands with %d tasks running over %s: %s", running, window, top(busy))

	// The second node, then the first frozen.
	recoveryNode(b, srv.uri, srv.database, "b", dead)
	waitStartUp(b, db, "b")
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		b.Fatal(err)
	}
	frozen := time.Now()
	b.Cleanup(func() { a.Process.Signal(syscall.SIGCONT) })
	// Node a holds every task (the queue's maxthreads), so what runs
	// under node b is an attempt 2.
	again := bson.D{{Key: "node", Value: "b"}, {Key: "status", Value: queue.StatusRunning}, {Key: "runner.at", Value: bson.D{{Key: "$exists", Value: true}}}}
	waitCount(b, db, again, running, dead+10*time.Minute)
	// Node a's last heartbeat: a write it had in flight at the freeze has
	// landed long since.
	var nodeDoc struct {
		Timestamp time.Time `bson:"timestamp"`
	}
	if err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "a"}}).Decode(&nodeDoc); err != nil {
		b.Fatalf("node a's document: %v", err)
	}
	var waits []time.Duration
	cur, err := db.Collection("tasks").Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		b.Fatal(err)
	}
	var tasks []struct {
		Runner struct {
			At time.Time `bson:"at"`
		} `bson:"runner"`
	}
	if err := cur.All(ctx, &tasks); err != nil {
		b.Fatal(err)
	}
	for _, t := range tasks {
		waits = append(waits, t.Runner.At.Sub(nodeDoc.Timestamp))
	}
	slices.Sort(waits)
	first, median, last := waits[0], waits[len(waits)/2], waits[len(waits)-1]
	b.ReportMetric(idleRate, "idle-cmds/s")
	b.ReportMetric(busyRate, "running-cmds/s")
	b.ReportMetric(perTask, "beat-cmds/task/s")
	b.ReportMetric(first.Seconds(), "recovery-first-s")
	b.ReportMetric(median.Seconds(), "recovery-p50-s")
	b.ReportMetric(last.Seconds(), "recovery-max-s")
	b.Logf("dead_node_after %s, beat every %s, %d tasks: idle %.2f commands/s, running %.2f commands/s, beats %.3f commands/s per running task; "+
		"frozen %s after its last heartbeat; attempt 2 started %s to %s (median %s) after it",
		dead, queue.BeatEvery(dead), running, idleRate, busyRate, perTask,
		frozen.Sub(nodeDoc.Timestamp).Round(time.Millisecond), first.Round(time.Millisecond), last.Round(time.Millisecond), median.Round(time.Millisecond))
}

// recoveryNode starts this test binary as a node with production
// intervals and the given dead_node_after.
func recoveryNode(b *testing.B, uri, database, name string, dead time.Duration) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), dentest.EnvRole+"=node", envNodeURI+"="+uri, envNodeDB+"="+database,
		envNodeName+"="+name, envNodeRunLog+"="+filepath.Join(b.TempDir(), "runners.log"), envNodeDefaults+"=1",
		envNodeDeadAfter+"="+dead.String())
	log, err := os.Create(filepath.Join(b.TempDir(), "node-"+name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// waitCount polls (once a second) until filter matches want tasks, or
// fails the benchmark after limit.
func waitCount(b *testing.B, db *mongo.Database, filter bson.D, want int, limit time.Duration) {
	b.Helper()
	var n int64
	if !dentest.UntilBy(time.Now().Add(limit), time.Second, func() bool {
		var err error
		n, err = db.Collection("tasks").CountDocuments(context.Background(), filter)
		return err == nil && n >= int64(want)
	}) {
		b.Fatalf("%d of %d tasks matched %v after %s", n, want, filter, limit)
	}
}
