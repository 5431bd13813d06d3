package den

import (
	"context"
	"encoding/json"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// env is what every component of a node works with: its store, its log,
// its clock, its metrics, and the conditions it has logged as started and
// not yet as cleared. New makes one, and each component holds a pointer
// to it. What each component reads of the node's configuration is in its
// own params struct (below), which New fills from Config.
type env struct {
	store queue.NodeStore
	// rates are the queues' rate limits, on the same database.
	rates *queue.RateLimits
	log   *zap.Logger
	// clock is the database server's time, as this host estimates it
	// (synced by the passes every ClockEvery).
	clock   *queue.Clock
	metrics *metrics.Metrics
	notes   *notices
	// signals tell a test what the node does (Config.Signals; nil in
	// production).
	signals *TestSignals
}

// now is the database server's time, as this host estimates it.
func (e *env) now() time.Time { return e.clock.Now() }

// passesParams is what the loop's passes read of the configuration.
type passesParams struct {
	Name                     string
	Interval                 time.Duration
	RefreshEvery, ClockEvery time.Duration
	ProbeEvery               time.Duration
	ActiveQueues             []string
	IgnoreQueues             []string
	GFS                      string
	PluginConfig             map[string]json.RawMessage
}

// claimerParams is what the claimer reads of the configuration.
type claimerParams struct {
	Name         string
	Interval     time.Duration
	RefreshEvery time.Duration
	Arrivals     ArrivalSource
	// hooks calls Config.BeforeHandOver.
	hooks testHooks
}

// heartbeatParams is what the heartbeat reads of the configuration.
type heartbeatParams struct {
	Name         string
	Interval     time.Duration
	RefreshEvery time.Duration
	Version      string
}

// poolParams is what the pool reads of the configuration: what it hands
// each runner in its spec, and how it starts and keeps them.
type poolParams struct {
	Name, URI, Database string
	DeadNodeAfter       time.Duration
	MaxTermination      time.Duration
	MaxOutput           int64
	PluginConfig        map[string]json.RawMessage
	Runner              RunnerCommand
}

// rescuerParams is what the rescuer reads of the configuration.
type rescuerParams struct {
	Name          string
	DeadNodeAfter time.Duration
	OrphanAge     time.Duration
	RescueEvery   time.Duration
}

// sweeperParams is what the sweeper reads of the configuration.
type sweeperParams struct {
	Name          string
	SweepEvery    time.Duration
	DeadNodeAfter time.Duration
}

// retentionParams is what the retention reads of the configuration.
type retentionParams struct {
	Name           string
	Retention      queue.Retention
	RetentionEvery time.Duration
	// hooks calls Config.OnRetentionBatch.
	hooks testHooks
}

// schedulerParams is what the scheduler reads of the configuration.
type schedulerParams struct {
	RefreshEvery time.Duration
}

// statsParams is what the stats recorder reads of the configuration.
type statsParams struct {
	Name string
}

// testHooks calls the hooks a test set in Config (BeforeHandOver,
// OnRetentionBatch); production sets none, and each call does nothing.
// The hooks stay Config's: the components reach them through it.
type testHooks struct {
	cfg *Config
}

// beforeHandOver calls Config.BeforeHandOver, if set, with the claim's
// context and the task just claimed.
func (h testHooks) beforeHandOver(ctx context.Context, task bson.ObjectID) {
	if h.cfg != nil && h.cfg.BeforeHandOver != nil {
		h.cfg.BeforeHandOver(ctx, task)
	}
}

// retentionBatch calls Config.OnRetentionBatch, if set.
func (h testHooks) retentionBatch(start bool) {
	if h.cfg != nil && h.cfg.OnRetentionBatch != nil {
		h.cfg.OnRetentionBatch(start)
	}
}
