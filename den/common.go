package den

import (
	"encoding/json"
	"time"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/heartbeat"
	"github.com/den-project/den/den/internal/runners"

	"go.mongodb.org/mongo-driver/v2/bson"
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

// testHooks calls the hook a test set in Config (BeforeHandOver);
// production sets none, and each call does nothing.
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

// RunnerCommand is how a node starts a task runner (runners.Command).
type RunnerCommand = runners.Command

// NodeQueuesMax is the most queues a node lists in its node document
// (heartbeat.NodeQueuesMax).
const NodeQueuesMax = heartbeat.NodeQueuesMax
