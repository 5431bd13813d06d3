package den

import (
	"encoding/json"
	"time"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/runners"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// TestSignals tell a test what a node did as it does it (base.Signals).
// A test sets Config.Signals and calls Init before the node starts;
// production leaves Config.Signals nil, and signalling then costs a nil
// check.
type TestSignals = base.Signals

// TaskEnd is a task's end as its runner reported it (base.TaskEnd).
type TaskEnd = base.TaskEnd

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

// beforeHandOver calls Config.BeforeHandOver, if set, with the task just
// claimed.
func (h testHooks) beforeHandOver(task bson.ObjectID) {
	if h.cfg != nil && h.cfg.BeforeHandOver != nil {
		h.cfg.BeforeHandOver(task)
	}
}

// retentionBatch calls Config.OnRetentionBatch, if set.
func (h testHooks) retentionBatch(start bool) {
	if h.cfg != nil && h.cfg.OnRetentionBatch != nil {
		h.cfg.OnRetentionBatch(start)
	}
}

// RunnerCommand is how a node starts a task runner (runners.Command).
type RunnerCommand = runners.Command
