package queue

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Resource usage of a run: den's own fields, ignored by Disbatch 4 nodes.
const (
	// FieldUsage is the usage sub-document of a task (its current or last
	// run) and of each history entry (that run).
	FieldUsage = "usage"
	// FieldUsageInterval: seconds between updates of a running task's
	// usage (task, else queue; default DefaultUsageInterval). 0: no
	// updates while it runs, only the final one.
	FieldUsageInterval = "usage_interval"
)

// DefaultUsageInterval is how often a running task's usage is written when
// neither the task nor its queue sets usage_interval.
const DefaultUsageInterval = 60 * time.Second

// Usage is what one run used: the run is den's task-runner worker (which
// runs the plugin) and every process started under it. CPU is exact (the
// kernel's accounting of every process of the run, those that ended
// included); PeakRSSMB is sampled, so a peak between samples can be
// missed, though never below the largest single process's own peak;
// PeakMemoryMB, where the run has a cgroup, is the kernel's exact peak of
// it (memory.peak, which counts page cache too).
type Usage struct {
	WallS      float64 `bson:"wall_s"`
	CPUUserS   float64 `bson:"cpu_user_s"`
	CPUSystemS float64 `bson:"cpu_system_s"`
	PeakRSSMB  float64 `bson:"peak_rss_mb"`
	// PeakMemoryMB is set only where the run has a cgroup.
	PeakMemoryMB *float64 `bson:"peak_memory_mb,omitempty"`
	// Samples counts the samples of the process tree PeakRSSMB is the
	// largest of.
	Samples int `bson:"samples"`
	// At is when these numbers were taken.
	At time.Time `bson:"at"`
	// Running is true in the updates written while the run goes on.
	Running bool `bson:"running,omitempty"`
}

// UsageOf decodes the usage sub-document of a task or history entry; ok
// is false when it has none or it cannot be read.
func UsageOf(doc bson.Raw) (u Usage, ok bool) {
	v, err := doc.LookupErr(FieldUsage)
	if err != nil {
		return u, false
	}
	d, isDoc := v.DocumentOK()
	if !isDoc || bson.Unmarshal(d, &u) != nil {
		return Usage{}, false
	}
	return u, true
}

// SetUsage records the usage of a run while it goes on. It reports false
// when the task is no longer that run's.
func (s *Store) SetUsage(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, u Usage) (bool, error) {
	res, err := s.tasks.UpdateOne(ctx, running(taskID, node, token), bson.D{{Key: "$set", Value: bson.D{{Key: FieldUsage, Value: u}}}})
	if err != nil {
		return false, fmt.Errorf("record usage of task %s: %w", taskID.Hex(), err)
	}
	return res.MatchedCount == 1, nil
}
