package den

import (
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// common is what every component of a node works with: the node's
// configuration (defaults filled in), its store, its log, its clock, its
// metrics, and the conditions it has logged as started and not yet as
// cleared. New makes one, and each component holds a pointer to it.
type common struct {
	cfg   Config
	store *queue.NodeStore
	log   *zap.Logger
	// now is clock's Now: the database server's time, as this host
	// estimates it (synced by the passes every RefreshEvery).
	now     func() time.Time
	clock   *queue.Clock
	metrics *metrics.Metrics
	notes   *notices
}
