package base

import (
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// Env is what every component of a node works with: its store, its log,
// its clock, its metrics, and the conditions it has logged as started and
// not yet as cleared. den.New makes one, and each component holds a
// pointer to it. What each component reads of the node's configuration is
// in its own params struct, which den.New fills from den.Config.
type Env struct {
	Store queue.NodeStore
	// Rates are the queues' rate limits, on the same database.
	Rates *queue.RateLimits
	Log   *zap.Logger
	// Clock is the database server's time, as this host estimates it
	// (synced by the passes every den.Config.ClockEvery).
	Clock   *queue.Clock
	Metrics *metrics.Metrics
	Notes   *Notices
	// Signals tell a test what the node does (den.Config.Signals; nil in
	// production).
	Signals *Signals
}

// Now is the database server's time, as this host estimates it.
func (e *Env) Now() time.Time { return e.Clock.Now() }
