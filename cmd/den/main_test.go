package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

func TestMain(m *testing.M) { dentest.Main(m, nil) }

// denBin returns the den binary, built once for the package.
func denBin(t testing.TB) string {
	t.Helper()
	bin, err := dentest.BuildDen(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newBuffer() *lockedBuffer { return &lockedBuffer{mu: make(chan struct{}, 1)} }
func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.b.String()
}

func start(t testing.TB, args ...string) (*exec.Cmd, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(denBin(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	stdout, stderr := newBuffer(), newBuffer()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A task runner the node started may outlive it and hold its output
	// pipes; Wait must not wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// As an operator stops it: den devdb stops its PostgreSQL and
		// waits for it, so that nothing writes to a data directory the
		// test's TempDir cleanup removes next. Killed if it takes long.
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { defer close(done); cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("den %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
		}
	})
	return cmd, stdout, stderr
}

func demoTask(t *testing.T, db *mongo.Database, qid bson.ObjectID, commands string) bson.ObjectID {
	t.Helper()
	id := bson.NewObjectID()
	_, err := db.Collection("tasks").InsertOne(dentest.Context(t), bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
		{Key: "parameters", Value: bson.D{{Key: "commands", Value: commands}}},
		{Key: "ctime", Value: time.Now()}, {Key: "mtime", Value: time.Now()}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func stopAndWait(t testing.TB, cmd *exec.Cmd, sig syscall.Signal) time.Duration {
	t.Helper()
	sent := time.Now()
	cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("den exited with %v after %v, want 0", err, sig)
		}
	case <-dentest.GiveUp():
		t.Fatalf("den had not exited by the test's deadline after %v", sig)
	}
	return time.Since(sent)
}

// den run with an existing Disbatch config.json runs the demo plugin's
// tasks, and exits 0 on SIGTERM.
func TestRunWithDisbatchConfig(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "demo", demo.Name, 2, "fifo")
	cfg := filepath.Join(t.TempDir(), "config.json")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`{
  # as in /etc/disbatch/config.json
  "mongohost": %q,
  "database": %q,
  "gfs": "auto",
  "plugins": ["Disbatch::Plugin::Demo"],
}`, strings.TrimSuffix(dentest.URI(), "/"), db.Name())), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd, _, stderr := start(t, "run", "--config", cfg, "--node", "e2e", "--log-format", "json")
	ok := demoTask(t, db, qid, "ab")
	fail := demoTask(t, db, qid, "*") // abc: c fails the task
	raw := dentest.WaitStatus(t, db, ok, 1)
	if raw.Lookup("stdout").StringValue() != "This is command 'a' for apple.\n" ||
		raw.Lookup("stderr").StringValue() != "This is command 'b' for banana.\n" {
		t.Fatalf("task ab stored %s", raw)
	}
	raw = dentest.WaitStatus(t, db, fail, 2)
	if raw.Lookup("stderr").StringValue() != "This is command 'b' for banana.\nThis is command 'c' for cry.\n" {
		t.Fatalf("task * stored %s", raw)
	}
	var report bson.M
	if err := db.Collection("reports").FindOne(dentest.Context(t), bson.D{{Key: "task_id", Value: fail}}).Decode(&report); err != nil {
		t.Fatal(err)
	}
	if report["status"] != "FAILED" || report["commands"] != "*" || report["queue_id"] != qid || report["error"] == nil {
		t.Fatalf("report %v", report)
	}
	// den output prints what was stored.
	out, err := exec.Command(denBin(t), "output", fail.Hex(), "--stderr", "--mongo-uri", dentest.URI(), "--database", db.Name()).CombinedOutput()
	if err != nil || string(out) != "This is command 'b' for banana.\nThis is command 'c' for cry.\n" {
		t.Fatalf("den output --stderr: %v %q", err, out)
	}
	took := stopAndWait(t, cmd, syscall.SIGTERM)
	t.Logf("exit %s after SIGTERM", took)
	if !strings.Contains(stderr.String(), `"msg":"node stopped`) {
		t.Fatalf("no JSON shutdown line in log:\n%s", stderr)
	}
}

func TestConfigErrorsExitNonZero(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("gfs: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// The file exists: the error names it and what is wrong in it.
		{[]string{"run", "--config", bad}, []string{bad, "gfs must be"}},
		{[]string{"run", "--config", "/nonexistent/den.yaml"}, []string{"/nonexistent/den.yaml"}},
		{[]string{"run"}, []string{"no MongoDB configured"}},
	} {
		cmd := exec.Command(denBin(t), tc.args...)
		cmd.Env = append(os.Environ(), "DEN_MONGO_URI=")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("den %v succeeded", tc.args)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(string(out), want) {
				t.Errorf("den %v said %q, want it to mention %q", tc.args, out, want)
			}
		}
	}
}

// den dev on a fresh data directory: prints the URI, creates the demo
// queue, runs tasks inserted by a client; restarted on the same directory,
// the data is still there and no second demo queue appears.
func TestDev(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	var uri string
	for round := range 2 {
		cmd, stdout, _ := start(t, "dev", "--data", data, "--listen", "127.0.0.1:0", "--node", "dev")
		dentest.Eventually(t, time.Minute, "URI printed", func() bool {
			for _, f := range strings.Fields(stdout.String()) {
				if strings.HasPrefix(f, "mongodb://") {
					uri = f
					return true
				}
			}
			return false
		})
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		db := client.Database("disbatch")
		var q bson.M
		if err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "name", Value: "demo"}}).Decode(&q); err != nil {
			t.Fatalf("round %d: no demo queue: %v", round, err)
		}
		if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 1 {
			t.Fatalf("round %d: %d queues", round, n)
		}
		id := demoTask(t, db, q["_id"].(bson.ObjectID), "a")
		dentest.WaitStatus(t, db, id, 1)
		if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "status", Value: 1}}); n != int64(round+1) {
			t.Fatalf("round %d: %d finished tasks, want %d (data kept between runs)", round, n, round+1)
		}
		client.Disconnect(context.Background())
		stopAndWait(t, cmd, syscall.SIGINT)
	}
}

// devURI waits for den dev (or devdb) to print its URI and returns it.
func devURI(t testing.TB, stdout *lockedBuffer) string {
	t.Helper()
	var uri string
	dentest.Eventually(t, time.Minute, "URI printed", func() bool {
		for _, f := range strings.Fields(stdout.String()) {
			if strings.HasPrefix(f, "mongodb://") {
				uri = f
				return true
			}
		}
		return false
	})
	return uri
}

// One den dev at a time on a data directory: a second one (dev or devdb)
// says which process holds it and exits 1 without serving anything; once
// the first has exited, a new one starts on the same directory.
func TestDevLocksDataDirectory(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	first, stdout, _ := start(t, "dev", "--data", data, "--listen", "127.0.0.1:0", "--node", "dev")
	devURI(t, stdout)
	for _, args := range [][]string{
		{"dev", "--data", data, "--listen", "127.0.0.1:0", "--node", "dev2"},
		{"devdb", "--data", data, "--listen", "127.0.0.1:0"},
	} {
		second, out2, err2 := start(t, args...)
		done := make(chan error, 1)
		go func() { done <- second.Wait() }()
		select {
		case err := <-done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("second den %s on the same directory: %v, want exit status 1", args[0], err)
			}
		case <-dentest.GiveUp():
			second.Process.Kill()
			<-done // one Wait at a time: start's cleanup waits too
			t.Fatalf("second den %s on the same directory is still running at the test's deadline", args[0])
		}
		msg := err2.String()
		if !strings.Contains(msg, "in use by process "+strconv.Itoa(first.Process.Pid)) || !strings.Contains(msg, data) {
			t.Errorf("second den %s said %q; want the first's pid %d and the directory", args[0], msg, first.Process.Pid)
		}
		if strings.Contains(out2.String(), "mongodb://") {
			t.Errorf("second den %s printed a URI: %s", args[0], out2)
		}
	}
	stopAndWait(t, first, syscall.SIGINT)
	again, stdout, _ := start(t, "dev", "--data", data, "--listen", "127.0.0.1:0", "--node", "dev")
	client, err := mongo.Connect(options.Client().ApplyURI(devURI(t, stdout)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	if n, err := client.Database("disbatch").Collection("queues").CountDocuments(dentest.Context(t), bson.D{}); err != nil || n != 1 {
		t.Fatalf("restarted den dev: %d queues (%v), want the demo queue", n, err)
	}
	stopAndWait(t, again, syscall.SIGINT)
}

// Started while MongoDB is down, the node logs the outage once, and starts
// working when MongoDB comes up.
func TestWaitsForMongoDB(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, _, stderr := start(t, "run", "--mongo-uri", "mongodb://"+addr+"/?serverSelectionTimeoutMS=300", "--database", "d", "--node", "waiter",
		"--log-format", "json", "--log-level", "debug")
	// Each attempt after the first is a line at debug level.
	dentest.Eventually(t, time.Minute, "three attempts to reach MongoDB", func() bool {
		return strings.Count(stderr.String(), "MongoDB still unreachable") >= 2
	})
	if c := strings.Count(stderr.String(), "MongoDB unreachable"); c != 1 {
		t.Fatalf("outage logged %d times in three attempts or more, want once:\n%s", c, stderr)
	}
	start(t, "devdb", "--data", t.TempDir(), "--listen", addr)
	dentest.Eventually(t, 2*time.Minute, "node running", func() bool { return strings.Contains(stderr.String(), "node running") })
	if !strings.Contains(stderr.String(), "MongoDB reachable") {
		t.Fatalf("recovery not logged:\n%s", stderr)
	}

}

// MongoDB goes away while the node runs: the outage is logged once, not
// every second; when MongoDB is back the node says so and works again.
func TestMongoDBOutageMidRun(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	data := t.TempDir()
	dbProc, _, _ := start(t, "devdb", "--data", data, "--listen", addr)
	httpAddr := freeAddr(t)
	_, _, stderr := start(t, "run", "--mongo-uri", "mongodb://"+addr+"/?serverSelectionTimeoutMS=500", "--database", "d", "--node", "survivor", "--log-format", "json",
		"--http-listen", httpAddr)
	dentest.Eventually(t, time.Minute, "node running", func() bool { return strings.Contains(stderr.String(), "node running") })
	failed := func() float64 { return metric(t, httpAddr, "den_database_errors_total") }
	before := failed()
	dbProc.Process.Signal(syscall.SIGKILL)
	dbProc.Wait()
	dentest.Eventually(t, time.Minute, "three passes failed", func() bool { return failed() >= before+3 })
	if c := strings.Count(stderr.String(), "MongoDB unreachable or failing"); c != 1 {
		t.Fatalf("outage logged %d times, want once:\n%s", c, stderr)
	}
	start(t, "devdb", "--data", data, "--listen", addr)
	dentest.Eventually(t, time.Minute, "recovery logged", func() bool { return strings.Contains(stderr.String(), "MongoDB reachable again") })
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("d")
	qid := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
	dentest.WaitStatus(t, db, demoTask(t, db, qid, "a"), 1)
}

// metric is the value of an unlabelled metric on the /metrics of the
// node whose endpoint is addr (-1 when it has none).
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("the node's /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the node's /metrics: %v", err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q", name, l)
			}
			return f
		}
	}
	return -1
}
