package den_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins"
	_ "github.com/den-project/den/plugins/demo"
)

// The test binary plays the task runner for the nodes the tests start (so
// the test plugins are available to runners), and a whole node for the
// tests that kill one.
func TestMain(m *testing.M) {
	dentest.Main(m, map[string]func() int{
		"task-runner": nodetest.RunnerRole,
		"node":        nodeRole,
	})
}

// Environment of the node role.
const (
	envNodeURI      = "DEN_TEST_NODE_URI"
	envNodeDB       = "DEN_TEST_NODE_DB"
	envNodeName     = "DEN_TEST_NODE_NAME"
	envNodeRunLog   = "DEN_TEST_NODE_RUNNER_LOG"
	envHandOverHold = "DEN_TEST_HANDOVER_HOLD" // hold each hand-over until the node is told to stop
	// envNodeDefaults makes the node role use the production intervals
	// (loop, sweeps, rescue) instead of the tests' fast ones.
	envNodeDefaults = "DEN_TEST_NODE_DEFAULTS"
	// envNodeHost makes the node another host: the test started it in
	// UTS, PID and mount namespaces of its own (hostProcess), and it
	// takes this hostname and mounts a /proc of its PID namespace.
	envNodeHost = "DEN_TEST_NODE_HOST"
	// envNodeLease is the node's dead_node_after (a Go duration); its
	// runners beat as queue.BeatEvery says, and its tasks' grace is 1 s.
	envNodeLease = "DEN_TEST_NODE_LEASE"
	// envNodeClock is how far the node's host clock is off (a Go
	// duration), as nodetest.StartClock's now.
	envNodeClock = "DEN_TEST_NODE_CLOCK"
	// envNodeDirect makes the node's runners connect to the database
	// themselves (runner.relay: false).
	envNodeDirect = "DEN_TEST_NODE_DIRECT"
	// envNodeDeadAfter sets the node role's dead_node_after (a Go
	// duration).
	envNodeDeadAfter = "DEN_TEST_NODE_DEAD_AFTER"
	// envNodeHTTP makes the node role serve its HTTP endpoint on this
	// address, with Go's profiles under /debug/pprof/ (for benchmarks).
	envNodeHTTP = "DEN_TEST_NODE_HTTP"
)

func nodeRole() int {
	if host := os.Getenv(envNodeHost); host != "" {
		if err := becomeHost(host); err != nil {
			fmt.Printf("host refused: %v\n", err) // the test skips, saying this
			return 3
		}
		fmt.Println("host " + host) // the test waits for this line
	}
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(envNodeURI)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log, _ := zap.NewDevelopment()
	cfg := runnerConfig(os.Getenv(envNodeName), os.Getenv(envNodeURI), os.Getenv(envNodeDB), os.Getenv(envNodeRunLog))
	if os.Getenv(envNodeDefaults) != "" {
		cfg.Interval, cfg.SweepEvery, cfg.RescueEvery, cfg.RefreshEvery, cfg.ProbeEvery = 0, 0, 0, 0, 0
	}
	if d, err := time.ParseDuration(os.Getenv(envNodeDeadAfter)); err == nil {
		cfg.DeadNodeAfter = d
	}
	if lease, err := time.ParseDuration(os.Getenv(envNodeLease)); err == nil {
		cfg.DeadNodeAfter, cfg.MaxTermination = lease, time.Second
	}
	if os.Getenv(envNodeDirect) != "" {
		cfg.Runner.Direct = true
	}
	var now func() time.Time
	if off, err := time.ParseDuration(os.Getenv(envNodeClock)); err == nil {
		now = func() time.Time { return time.Now().Add(off) }
	}
	if os.Getenv(envHandOverHold) != "" {
		cfg.BeforeHandOver = func(ctx context.Context, _ bson.ObjectID) {
			fmt.Println("claimed") // the test waits for this line
			<-ctx.Done()           // held until the node is told to stop
		}
	}
	if addr := os.Getenv(envNodeHTTP); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		m := metrics.New(prometheus.NewRegistry())
		cfg.HTTP, cfg.Metrics = ln, m
		prof := http.NewServeMux()
		prof.HandleFunc("/debug/pprof/", pprof.Index)
		prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
		cfg.HTTPMounts = []httpserve.Mount{{Prefix: "/debug/pprof/", Handler: prof}}
		client, err = mongo.Connect(options.Client().ApplyURI(os.Getenv(envNodeURI)).SetMonitor(m.CommandMonitor()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	node, err := den.New(cfg, client.Database(os.Getenv(envNodeDB)), plugins.Default(), log, now)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := node.Run(ctx); err != nil {
		log.Error("node failed", zap.Error(err))
		return 1
	}
	return 0
}

// runnerConfig is a node configuration whose runners are this test binary
// (nodetest.Config).
func runnerConfig(name, uri, database, runnerLog string) den.Config {
	return nodetest.Config(name, uri, database, runnerLog)
}

// becomeHost makes this process, started in UTS, PID and mount namespaces
// of its own, another host as den sees one: its hostname, and a /proc
// that shows its own processes only (its runners', not the test's or
// another node's).
func becomeHost(host string) error {
	if err := syscall.Sethostname([]byte(host)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}
