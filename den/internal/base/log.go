package base

import (
	"go.uber.org/zap"

	"github.com/den-project/den/den/metrics"
)

// QueueField is a queue's name as a log field: whatever its writer put
// there, so made valid UTF-8 and cut to a few hundred bytes (a name can be
// megabytes).
func QueueField(name string) zap.Field { return zap.String("queue", metrics.Label(name)) }
