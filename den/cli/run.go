package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/den/web"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
)

func newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node against MongoDB until SIGTERM or SIGINT",
		Long: `Run the node against the MongoDB named by the configuration (file, then
DEN_* environment, then flags) until SIGTERM or SIGINT. Stopping the node
does not stop running tasks: their runners finish on their own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load("", cmd.Flags())
			if err != nil {
				return usageError{err} // a value refused: exit 2, as every command
			}
			if slackErr != nil {
				cfg.Warnings = append(cfg.Warnings, "running with the timer slack this process was started with: "+slackErr.Error())
			}
			if cfg.MongoURI == "" {
				return usagef("no MongoDB configured: set mongo.uri (or mongohost) in the file given with --config, DEN_MONGO_URI, or --mongo-uri; `den dev` runs on an embedded database instead")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runNode(ctx, cfg, 0)
		},
	}
	config.AddFlags(cmd.Flags())
	return cmd
}

// runNode connects to MongoDB and runs a node until ctx is done.
// drainOnStop is den.Config.DrainOnStop: zero for den run (tasks continue
// in their runners), positive for den dev, whose database stops with it.
// extra collectors join the node's /metrics (den dev's database's).
func runNode(ctx context.Context, cfg config.Config, drainOnStop time.Duration, extra ...prometheus.Collector) error {
	log, jsonLogs, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer log.Sync()
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	commandPolicy, err := json.Marshal(cfg.Command)
	if err != nil {
		return fmt.Errorf("command policy: %w", err)
	}
	policy, err := command.ParsePolicy(commandPolicy)
	if err != nil {
		return err
	}
	policy.LogBoundary(log, command.ThisMachine())
	// The node's collectors, on a registry of its own (never Prometheus's
	// global one), watching the commands of the node's client.
	m := metrics.New(prometheus.NewRegistry())
	m.Registry().MustRegister(extra...)
	var httpLn net.Listener
	if cfg.HTTPListen != "" {
		// Bound before anything else, so that a taken port fails the start
		// with a clear error instead of a node without its endpoint.
		if httpLn, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTPListen, err)
		}
		defer httpLn.Close() // Run closes it too; this covers an early return
	}
	client, err := connect(cfg.MongoURI, "den", m.CommandMonitor())
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		client.Disconnect(dctx)
	}()
	var mounts []httpserve.Mount
	if cfg.HTTPWeb && httpLn != nil {
		// The status page on the node's own endpoint: /metrics, /healthz
		// and /readyz stay the endpoint's (answering any Host: they carry
		// nothing of tasks, and scrapers and probes use names the node
		// cannot know); everything else is the page's, which answers only
		// its own host names.
		page, err := web.New(web.Options{DB: client.Database(cfg.Database), Log: log.With(zap.String("component", "web")),
			Token: cfg.WebToken, DeadNodeAfter: cfg.DeadNodeAfter, Listen: cfg.HTTPListen, Addr: httpLn.Addr(), Hosts: cfg.WebHosts,
			CountsAge: webCountsAge(cfg.WebCountsAge)})
		if err != nil {
			return err
		}
		mounts = append(mounts, httpserve.Mount{Prefix: "/", Handler: page})
	}
	// The node runs with the configuration as loaded, plus what only this
	// process has.
	nodeCfg := cfg.Config
	nodeCfg.Runner.LogJSON = jsonLogs
	nodeCfg.Metrics, nodeCfg.HTTP, nodeCfg.HTTPMounts = m, httpLn, mounts
	nodeCfg.Version, nodeCfg.DrainOnStop = version(), drainOnStop
	node, err := den.New(nodeCfg, client.Database(cfg.Database), plugins.Default(), log, nil)
	if err != nil {
		return err
	}
	if cfg.File != "" {
		log.Info("configuration loaded", zap.String("file", cfg.File))
	}
	return node.Run(ctx)
}
