package runners

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/queue"
)

// This file keeps a dead run from outliving its runner. A runner normally
// stops everything its task started (its supervisor is a child subreaper;
// see den/runner). When the runner itself is killed, what its task started
// keeps running; before the node retries or fails such a task it stops
// what is left of the run, found by the run's own identity: its cgroup
// (named from the task id and run token), and every process carrying the
// run marker DEN_RUN=<task>.<token> that started after the runner process
// (runner.started; for a reused runner that is before the run began, which
// only widens the search: the marker names this run's token). A retry
// therefore never overlaps the run it replaces.

// detectCgroup decides, once at start, whether runs get cgroups of their
// own, and logs what containment holds on this machine.
func DetectCgroup(mode string, log *zap.Logger) (string, error) {
	switch mode {
	case "", "auto", "on":
	case "off":
		log.Info("task containment: process tree (child subreaper) and run marker; per-run cgroups are off (cgroups: off)")
		return "", nil
	default:
		return "", fmt.Errorf("cgroups: %q is not auto, on or off", mode)
	}
	dir, err := contain.DetectCgroup()
	if err != nil {
		if mode == "on" {
			return "", fmt.Errorf("cgroups: on, but %w", err)
		}
		log.Info("task containment: process tree (child subreaper) and run marker; no per-run cgroups", zap.String("why", err.Error()))
		return "", nil
	}
	log.Info("task containment: a cgroup per run, plus process tree and run marker", zap.String("cgroup", dir))
	return dir, nil
}

// detectPids decides, once at start, whether a run's program gets a cgroup
// v1 pids cgroup of its own, whose pids.max holds its process limit (see
// RunnerCommand.MaxProcesses); "" when not, and then the program's
// RLIMIT_NPROC holds the limit (den/sandbox). cgroups: off turns it off
// too.
func DetectPids(mode string, log *zap.Logger) string {
	if mode == "off" {
		return ""
	}
	dir, err := contain.DetectPidsV1()
	if err != nil {
		log.Info("task process limit: RLIMIT_NPROC of the task's programs (it counts all of their user's processes, and root is exempt)", zap.String("why_no_pids_cgroup", err.Error()))
		return ""
	}
	log.Info("task process limit: pids.max of a cgroup v1 per run", zap.String("pids_cgroup", dir))
	return dir
}

// stopLeftovers stops what is left of a run of task id whose runner r is
// gone, and returns how many processes it stopped. It waits up to grace
// for them to end on SIGTERM before SIGKILL. It reports busy, and does
// nothing, when another goroutine is stopping the same run: the caller
// must then leave the task to it.
func (rs *Pool) stopLeftovers(ctx context.Context, id bson.ObjectID, r queue.RunnerInfo, grace time.Duration) (stopped int, busy bool) {
	rs.stopMu.Lock()
	if rs.stopping[r.Token] {
		rs.stopMu.Unlock()
		return 0, true
	}
	rs.stopping[r.Token] = true
	rs.stopMu.Unlock()
	defer func() {
		rs.stopMu.Lock()
		delete(rs.stopping, r.Token)
		rs.stopMu.Unlock()
	}()
	marker := contain.Marker(id.Hex(), r.Token.Hex())
	var cgroup string
	if rs.cgroup != "" {
		cgroup = contain.RunCgroup(rs.cgroup, id.Hex(), r.Token.Hex())
	}
	var pidsCgroup string
	if rs.pids != "" {
		pidsCgroup = contain.RunCgroup(rs.pids, id.Hex(), r.Token.Hex())
	}
	find := func() []int32 {
		pids := contain.Marked(ctx, marker, r.Started)
		for _, p := range slices.Concat(contain.CgroupProcs(cgroup), contain.CgroupProcs(pidsCgroup)) {
			if !contains(pids, p) {
				pids = append(pids, p)
			}
		}
		return pids
	}
	stopped = contain.Stop(ctx, find, grace, nil)
	for _, dir := range []string{cgroup, pidsCgroup} {
		if dir == "" {
			continue
		}
		contain.KillCgroup(dir)
		if err := contain.RemoveCgroup(dir, 10*time.Second); err != nil {
			rs.Log.Warn("cannot remove a dead run's cgroup", zap.String("task_id", id.Hex()), zap.Error(err))
		}
	}
	if stopped > 0 {
		rs.Log.Warn("stopped processes a dead runner's task left running", zap.String("task_id", id.Hex()), zap.Int("processes", stopped))
	}
	return stopped, false
}

func contains(pids []int32, p int32) bool {
	for _, q := range pids {
		if q == p {
			return true
		}
	}
	return false
}
