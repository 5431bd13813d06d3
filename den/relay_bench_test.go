package den_test

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/plugins"
)

// relayRunners is how many runners BenchmarkRelayConnections runs at once.
const relayRunners = 100

// BenchmarkRelayConnections runs relayRunners Test::Sleep tasks at once
// (a queue with maxthreads relayRunners, runners not reused) on the
// embedded server, with the relay on and with it off, and reports what the
// server saw: the client connections it accepted while the tasks ran
// (accepted), the most client connections open at once (peak-open,
// counted in /proc/net/tcp: the node's own included), the handshakes
// (hello and isMaster) and endSessions the runners sent, and how long the
// tasks took from insert to the last finish (a task sleeps
// DEN_BENCH_SLEEP_MS, default 20000). scripts/relay-connections.sh runs it.
func BenchmarkRelayConnections(b *testing.B) {
	sleep := 20000
	if v, err := strconv.Atoi(os.Getenv("DEN_BENCH_SLEEP_MS")); err == nil && v > 0 {
		sleep = v
	}
	for _, relay := range []bool{true, false} {
		b.Run(fmt.Sprintf("relay=%t", relay), func(b *testing.B) {
			for range b.N {
				relayConnections(b, relay, sleep)
			}
		})
	}
}

func relayConnections(b *testing.B, relay bool, sleepMS int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(srv.URI())
	if err != nil {
		b.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		b.Fatalf("server URI %s: no port", srv.URI())
	}
	// The benchmark's own reads and inserts go around the counting proxy.
	own, err := mongo.Connect(options.Client().ApplyURI(srv.DirectURI()))
	if err != nil {
		b.Fatal(err)
	}
	defer own.Disconnect(context.Background())
	ownDB := own.Database("relaybench")
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("relaybench")
	qid := dentest.Queue(b, ownDB, "sleep", sleepPlugin, relayRunners, "fifo")
	cfg := runnerConfig("relaybench", srv.URI(), db.Name(), filepath.Join(b.TempDir(), "runners.log"))
	cfg.Runner.Direct = !relay
	cfg.Runner.MaxTasks = 1
	var sig den.TestSignals
	sig.Init()
	cfg.Signals = &sig
	node, err := den.New(cfg, db, plugins.Default(), zap.NewNop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		node.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	// The node's first pass (indexes, its node document) is not the tasks'.
	sig.PassDone.Wait(b, "the node's first full pass")

	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), openTo(b, port)))
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	before := srv.Stats()
	start := time.Now()
	tasks := make([]bson.D, relayRunners)
	for i := range tasks {
		tasks[i] = bson.D{{Key: "ms", Value: sleepMS}, {Key: "i", Value: i}}
	}
	dentest.Tasks(b, ownDB, qid, tasks...)
	var n int64
	if !dentest.UntilBy(time.Now().Add(20*time.Minute), time.Second, func() bool {
		var err error
		n, err = ownDB.Collection("tasks").CountDocuments(context.Background(), bson.D{{Key: "status", Value: 1}})
		return err == nil && n == relayRunners
	}) {
		b.Fatalf("%d of %d tasks done in 20 minutes", n, relayRunners)
	}
	took := time.Since(start)
	close(stopSampling)
	<-sampled
	got := srv.Stats().Sub(before)
	handshakes := got.Commands["hello"] + got.Commands["isMaster"] + got.Commands["ismaster"]
	b.ReportMetric(float64(got.Connections), "accepted")
	b.ReportMetric(float64(peak.Load()), "peak-open")
	b.ReportMetric(float64(handshakes), "handshakes")
	b.ReportMetric(float64(got.Commands["endSessions"]), "endSessions")
	b.ReportMetric(took.Seconds(), "s-for-all")
	b.Logf("relay %t: %d tasks of %d ms: %d connections accepted, at most %d open at once, %d handshakes, %d endSessions, %s; commands %v",
		relay, relayRunners, sleepMS, got.Connections, peak.Load(), handshakes, got.Commands["endSessions"], took.Round(time.Second), got.Commands)
}

// openTo counts the established TCP connections, on this machine, whose
// remote end is the local port port: the clients of the server there.
func openTo(b *testing.B, port int) int64 {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st ...; st 01 is ESTABLISHED.
		if len(fields) > 3 && strings.HasSuffix(fields[2], want) && fields[3] == "01" {
			n++
		}
	}
	return n
}
