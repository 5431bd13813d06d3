package den

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/internal/claim"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/internal/heartbeat"
	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/internal/rescue"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/den/internal/retention"
	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/den/internal/schedule"
	"github.com/den-project/den/den/internal/stats"
	"github.com/den-project/den/den/internal/sweep"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Node is one Disbatch execution node. It owns the components that do
// the work and runs them: the loop's passes, whose steps (steps.go,
// housekeeping.go) call on the heartbeat, the claimer, the sweeper, the
// rescuer, the scheduler, the stats and the retention; the pool, which
// runs the tasks the claimer claims. Run starts and stops them.
type Node struct {
	*base.Env
	// cfg is the node's configuration, defaults filled in; each component
	// gets what it reads of it in a params struct of its own (wire).
	cfg     Config
	plugins *plugins.Registry

	passes  *passes
	beat    *heartbeat.Beat
	claimer *claim.Claimer
	sweeper *sweep.Sweeper
	rescuer *rescue.Rescuer
	pool    *runners.Pool
	// stats and retention have last words when the node stops.
	stats     *stats.Recorder
	retention *retention.Retention

	// running is true from the end of start (MongoDB answered) until Run
	// returns; with the passes' results, it makes Ready.
	running atomic.Bool
}

// New returns a node working on db. now may be nil (time.Now).
func New(cfg Config, db *mongo.Database, reg *plugins.Registry, log *zap.Logger, now func() time.Time) (*Node, error) {
	// Every default and every bound of the configuration, for the CLI's
	// node and an embedded one alike (config.go).
	cfg, err := cfg.forNode(db)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		reg = plugins.Default()
	}
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	return newNode(cfg, db, reg, log, now)
}

// newNode makes the node of New once cfg's defaults are filled in: it
// looks at what this host offers runs (cgroups, memfd), then wires the
// components (wire).
func newNode(cfg Config, db *mongo.Database, reg *plugins.Registry, log *zap.Logger, now func() time.Time) (*Node, error) {
	log = log.With(zap.String("node", cfg.Name))
	cgroup, err := runners.DetectCgroup(cfg.Cgroups, log)
	if err != nil {
		return nil, err
	}
	pids := runners.DetectPids(cfg.Cgroups, log)
	if cfg.Runner.MaxTasks > 1 {
		// A runner serves several tasks only where it can prove which one
		// it serves now (den/internal/contain/proof.go).
		if f, err := contain.HoldProof(""); err != nil {
			log.Warn("this kernel has no memfd: a task runner per task (runner.max_tasks 1)", zap.Error(err))
			cfg.Runner.MaxTasks = 1
		} else {
			f.Close()
		}
	}
	var rel *relay.Relay
	if !cfg.Runner.Direct {
		rel = relay.New(db.Client(), log.With(zap.String("component", "relay")))
	}
	clock := queue.NewClock(now)
	e := &base.Env{Store: queue.NewStore(db), Rates: queue.NewRateLimits(db), Log: log, Clock: clock, Metrics: cfg.Metrics, Notes: &base.Notices{}, Signals: cfg.Signals}
	n := &Node{Env: e, cfg: cfg, plugins: reg}
	pid, started := thisProcess(now)
	n.wire(rel, cgroup, pids, pid, started)
	return n, nil
}

// thisProcess is this process's pid and when it started (now, if the
// system does not say).
func thisProcess(now func() time.Time) (pid int, started time.Time) {
	pid, started = os.Getpid(), now()
	if p, err := process.NewProcess(int32(pid)); err == nil {
		if ms, err := p.CreateTime(); err == nil {
			started = time.UnixMilli(ms)
		}
	}
	return pid, started
}

// wire makes the node's components, each with the params it reads of
// n.cfg and the components it calls on. Two references go back: the
// pool tells the claimer when a slot frees (runnerEvents) and has the
// rescuer rescue a task whose runner died (runRescuer), both small
// interfaces set here once.
func (n *Node) wire(rel *relay.Relay, cgroup, pids string, pid int, started time.Time) {
	cfg, e := &n.cfg, n.Env
	read := &queuesRead{}
	n.pool = runners.New(e, runners.Params{
		Name: cfg.Name, URI: cfg.URI, Database: cfg.Database, DeadNodeAfter: cfg.DeadNodeAfter,
		MaxTermination: cfg.MaxTermination, MaxOutput: cfg.MaxOutput, PluginConfig: cfg.PluginConfig, Runner: cfg.Runner,
	}, rel, cgroup, pids, read)
	n.claimer = claim.New(e, claim.Params{Name: cfg.Name, Interval: cfg.Interval, RefreshEvery: cfg.RefreshEvery, Arrivals: cfg.Arrivals, BeforeHandOver: cfg.BeforeHandOver},
		n.pool, cfg.Resources, &base.Progress{})
	n.beat = &heartbeat.Beat{
		Env: e, Params: heartbeat.Params{Name: cfg.Name, Interval: cfg.Interval, RefreshEvery: cfg.RefreshEvery, Version: cfg.Version},
		Held: n.claimer.Held, Capacity: n.claimer.Capacity, Others: n.claimer,
		Host: &resources.Sampler{Every: cfg.ResourcesEvery}, PID: pid, Started: started, Plugins: servedPlugins(n.plugins, cfg.PluginConfig),
	}
	n.stats = &stats.Recorder{Env: e, Params: stats.Params{Name: cfg.Name}, Host: n.beat}
	n.pool.Stats = n.stats
	chores := &chore.Budget{StepTime: choresTime}
	n.sweeper = &sweep.Sweeper{
		Env: e, Params: sweep.Params{Name: cfg.Name, SweepEvery: cfg.SweepEvery, DeadNodeAfter: cfg.DeadNodeAfter},
		Chores: chores, Pool: n.pool, Self: n.beat, Claims: n.claimer,
	}
	n.rescuer = &rescue.Rescuer{
		Env: e, Params: rescue.Params{Name: cfg.Name, DeadNodeAfter: cfg.DeadNodeAfter, OrphanAge: cfg.OrphanAge, RescueEvery: cfg.RescueEvery},
		Chores: chores, Pool: n.pool, Held: n.claimer.Held, Queued: n.claimer,
	}
	schedules := &schedule.Scheduler{Env: e, Params: schedule.Params{RefreshEvery: cfg.RefreshEvery}}
	n.retention = &retention.Retention{
		Env: e, Params: retention.Params{Name: cfg.Name, Retention: cfg.Retention, RetentionEvery: cfg.RetentionEvery, OnBatch: cfg.OnRetentionBatch},
		Chores: chores,
	}
	n.passes = &passes{
		Env: e, params: passesParams{
			Name: cfg.Name, Interval: cfg.Interval, RefreshEvery: cfg.RefreshEvery, ClockEvery: cfg.ClockEvery, ProbeEvery: cfg.ProbeEvery,
			ActiveQueues: cfg.ActiveQueues, IgnoreQueues: cfg.IgnoreQueues, GFS: cfg.GFS, PluginConfig: cfg.PluginConfig,
		},
		plugins: n.plugins, chores: chores, held: n.claimer.Held, claimer: n.claimer, beat: n.beat, pool: n.pool,
		views: make(chan passView, 1), lastQueues: read, probed: probeState{pace: chore.Pace{Share: probeShare}},
	}
	n.passes.health = &health{interval: cfg.Interval, clock: e.Clock, loop: n.claimer.Progress, house: &base.Progress{}}
	n.passes.passSteps = fullPassSteps(n.passes, n.sweeper)
	n.passes.roundSteps = houseSteps(n.passes, n.rescuer, n.sweeper, n.stats, schedules, n.retention)
	n.pool.Slots = n.claimer
	n.pool.Rescuer = n.rescuer
	n.Metrics.SetState(n.passes.runningByQueue, n.passes.todoByQueue, n.Ready)
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Run runs the node until ctx is done: it waits for MongoDB, ensures the
// indexes, then runs the loop. On cancellation it stops claiming, puts back
// any task it claimed but did not hand to a runner, writes its node
// document one last time and returns nil. Running tasks are not touched:
// their runners are separate processes and finish on their own.
func (n *Node) Run(ctx context.Context) error {
	// Runners still running switch to their own connections.
	defer n.pool.CloseRelay()
	if n.cfg.HTTP != nil {
		// Served from the start, so that /healthz answers and /readyz says
		// why not while the node waits for MongoDB.
		hctx, stopHTTP := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() {
			defer close(served)
			err := httpserve.Serve(hctx, n.cfg.HTTP, httpserve.Config{
				Gatherer: n.Metrics.Registry(), Ready: n.Ready, ReadyNote: n.ReadyNote, Mounts: n.cfg.HTTPMounts,
				Log: n.Log.With(zap.String("component", "http")),
			})
			if err != nil {
				n.Log.Error("HTTP endpoint stopped; the node goes on without it", zap.Error(err))
			}
		}()
		defer func() { stopHTTP(); <-served }()
	}
	defer n.running.Store(false)
	// The plugins it runs tasks with, and apart those its configuration
	// keeps off (the command plugin unless enabled): not listed as on.
	on := servedPlugins(n.plugins, n.cfg.PluginConfig)
	n.Log.Info("node starting", zap.Strings("plugins", on), zap.Strings("plugins_off", offPlugins(n.plugins, on)),
		zap.String("database", n.cfg.Database), zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	if err := n.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	n.passes.health.runningSince.Store(n.Now().UnixNano())
	n.running.Store(true)
	n.Log.Info("node running", zap.Duration("interval", n.cfg.Interval))
	stopAlive := n.beat.KeepAlive(ctx)
	defer stopAlive()
	// The housekeeping runs beside the loop, and stops before the node's
	// last words (shutdown).
	hctx, stopHouse := context.WithCancel(ctx)
	housed := make(chan struct{})
	go func() { defer close(housed); n.passes.housekeep(hctx) }()
	defer func() { stopHouse(); <-housed }()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	waitWatch := n.claimer.WatchArrivals(wctx)
	defer func() { stopWatch(); waitWatch() }()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stopHouse()
			<-housed
			n.pool.RetireIdle(true)
			if n.cfg.DrainOnStop > 0 {
				n.pool.Drain(n.cfg.DrainOnStop)
			}
			n.shutdown()
			n.pool.Release()
			return nil
		case <-t.C:
			n.passes.full(ctx)
			t.Reset(n.cfg.Interval)
		case <-n.claimer.Woken():
			n.passes.claimOnly(ctx) // a slot is free: claim now
		}
	}
}

// logIndexes logs, once, what the indexes' set-up could not do as asked:
// each index made without (the server refused it) with what goes without
// it, each that exists otherwise, and the tasks whose unique_key was too
// long for its index.
func (n *Node) logIndexes(r queue.IndexReport) {
	for _, c := range r.Conflicts {
		n.Log.Warn("an index exists with other options; leaving it as is", zap.String("index", c))
	}
	for _, f := range r.Failed {
		n.Log.Error("could not create an index; running without it", zap.String("index", f.Index),
			zap.String("without_it", f.Without), zap.Error(f.Err))
	}
	if k := r.Keys; k.Any() {
		var ids []string
		for _, id := range k.Failed[:min(10, len(k.Failed))] {
			ids = append(ids, id.Hex())
		}
		n.Log.Warn("tasks had a unique_key longer than its index holds: those not yet claimed failed (reason in their stderr), the others' keys moved to unique_key_freed",
			zap.Int("max_bytes", queue.MaxUniqueKey), zap.Int("failed", len(k.Failed)), zap.Int("moved", len(k.Moved)), zap.Strings("failed_first", ids))
	}
}

// start waits for MongoDB and ensures the protocol's indexes, retrying with
// backoff and logging the outage once.
func (n *Node) start(ctx context.Context) error {
	waited := false
	err := n.cfg.Retry.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		report, err := n.Store.EnsureIndexes(cctx)
		if err != nil && (mongo.IsNetworkError(err) || mongo.IsTimeout(err)) {
			return err // tried again: what this attempt found is logged by the last
		}
		n.logIndexes(report)
		if err != nil {
			// MongoDB answered, but refused to list the indexes (no
			// privilege): the node can work without them, so say so
			// and go on.
			n.Log.Error("could not create the protocol's indexes; running without them", zap.Error(err))
		}
		return nil
	}, func(attempt int, err error) {
		if attempt == 1 {
			waited = true
			n.Log.Warn("MongoDB unreachable; retrying with backoff until it answers", zap.Error(err))
			return
		}
		n.Log.Debug("MongoDB still unreachable; retrying", zap.Int("attempt", attempt), zap.Error(err))
	})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // stopped while waiting: MongoDB's answer was the cancellation
	}
	if err != nil {
		return fmt.Errorf("wait for MongoDB: %w", err)
	}
	if waited {
		n.Log.Info("MongoDB reachable")
	}
	// Claims of this node's earlier life were never handed to a runner
	// that still exists (a runner moves its claim to 0 before anything
	// else, and fails to if the claim is gone): put them back now rather
	// than orphan them after orphan_age.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The server's time, before anything is written or decided by time
	// (the passes keep it synced).
	if err := n.Store.SyncClock(cctx, n.Clock); err != nil {
		n.Log.Warn("cannot read the database server's time; using this host's until a pass can", zap.Error(err))
	}
	released, err := n.Store.ReleaseClaims(cctx, n.cfg.Name, n.Now())
	switch {
	case err != nil:
		n.Log.Warn("could not put back the claims of this node's earlier run; they are rescued after orphan_age", zap.Error(err))
	case released > 0:
		n.Log.Warn("put back tasks this node had claimed before it restarted, never started", zap.Int64("count", released))
	}
	return nil
}

// shutdown writes the node document one last time, and the completions
// the stats collection has not had, and releases the retention lease.
func (n *Node) shutdown() {
	running := n.pool.Count()
	n.beat.WriteLast()
	n.stats.FlushLast()
	n.retention.Stop()
	n.Log.Info("node stopped; running tasks continue in their runners", zap.Int64("runners", running))
}

// Ready reports whether the node is ready, for /readyz: nil when it is
// running, MongoDB answered its last pass, and its loop works: a step of
// a pass (the queues read, the node document written, a claim answered,
// a pass completed) completed within the last 30 intervals (at least 90
// seconds: stuckAfter), however slow its passes. Else an error saying why not, on one
// line: MongoDB unreachable or failing, a document den cannot read, or
// "stuck: no progress for ...". It costs no database command: a node that
// works touches the database every interval anyway. ReadyNote says more
// of a node that is ready.
func (n *Node) Ready() error {
	_, err := n.readiness()
	return err
}

// ReadyNote is what /readyz adds to "ready": empty when all is well,
// else that the node works but its passes are slow ("working, passes are
// slow: ..."), or that its housekeeping (rescues, sweeps, ...) makes no
// progress or fails while its claims go on.
func (n *Node) ReadyNote() string {
	note, _ := n.readiness()
	return note
}

func (n *Node) readiness() (string, error) {
	if !n.running.Load() {
		return "", errors.New("not running: starting (waiting for MongoDB), or stopped")
	}
	return n.passes.health.report()
}
