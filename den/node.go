package den

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Node is one Disbatch execution node. It owns the components that do
// the work and runs them: the loop's passes, which call on the heartbeat,
// the claimer, the sweeper and the rescuer; the runners, which run the
// tasks the claimer claims. Run starts and stops them.
type Node struct {
	*common
	plugins *plugins.Registry

	passes  *passes
	beat    *heartbeat
	claimer *claimer
	sweeper *sweeper
	rescuer *rescuer
	runners *runners

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
	log = log.With(zap.String("node", cfg.Name))
	cgroup, err := detectCgroup(cfg.Cgroups, log)
	if err != nil {
		return nil, err
	}
	pids := detectPids(cfg.Cgroups, log)
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
	pid, started := os.Getpid(), now()
	if p, err := process.NewProcess(int32(pid)); err == nil {
		if ms, err := p.CreateTime(); err == nil {
			started = time.UnixMilli(ms)
		}
	}
	clock := queue.NewClock(now)
	c := &common{cfg: cfg, store: queue.NewStore(db), log: log, now: clock.Now, clock: clock, metrics: cfg.Metrics, notes: &notices{}}
	n := &Node{common: c, plugins: reg, runners: newRunners(c, rel, cgroup, pids)}
	n.claimer = newClaimer(c, n.runners, cfg.Resources, &progress{})
	n.beat = &heartbeat{
		common: c, held: n.claimer.held, capacity: n.claimer.capacity, othersRunning: n.claimer.othersRunning,
		host: &resources.Sampler{Every: cfg.ResourcesEvery}, pid: pid, started: started, plugins: servedPlugins(reg, cfg.PluginConfig),
	}
	stats := &statsRecorder{common: c, load: n.beat.load1}
	n.runners.stats = stats
	chores := &chores{}
	n.sweeper = &sweeper{common: c, chores: chores, runners: n.runners, offer: n.beat.offer, wake: n.claimer.wakeUp}
	n.rescuer = &rescuer{common: c, chores: chores, runners: n.runners, held: n.claimer.held, sawNodes: n.sweeper.noteOffers}
	n.passes = &passes{
		common: c, plugins: reg, chores: chores, held: n.claimer.held,
		claimer: n.claimer, beat: n.beat, sweeper: n.sweeper, rescuer: n.rescuer, runners: n.runners,
		schedules: &scheduler{common: c}, stats: stats, retention: &retention{common: c, chores: chores},
		views: make(chan passView, 1), loop: n.claimer.progress, house: &progress{},
	}
	n.beat.housekeeping = n.passes.housekeeping
	n.runners.slots = n.claimer
	n.runners.rescue = n.rescuer.rescue
	n.runners.queueName = n.passes.queueName
	n.metrics.SetState(n.passes.runningByQueue, n.passes.todoByQueue, n.Ready)
	return n, nil
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
	defer n.runners.closeRelay()
	if n.cfg.HTTP != nil {
		// Served from the start, so that /healthz answers and /readyz says
		// why not while the node waits for MongoDB.
		hctx, stopHTTP := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() {
			defer close(served)
			err := httpserve.Serve(hctx, n.cfg.HTTP, httpserve.Config{
				Gatherer: n.metrics.Registry(), Ready: n.Ready, ReadyNote: n.ReadyNote, Mounts: n.cfg.HTTPMounts,
				Log: n.log.With(zap.String("component", "http")),
			})
			if err != nil {
				n.log.Error("HTTP endpoint stopped; the node goes on without it", zap.Error(err))
			}
		}()
		defer func() { stopHTTP(); <-served }()
	}
	defer n.running.Store(false)
	n.log.Info("node starting", zap.Strings("plugins", n.plugins.Names()), zap.String("database", n.cfg.Database), zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	if err := n.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	n.passes.runningSince.Store(n.now().UnixNano())
	n.running.Store(true)
	n.log.Info("node running", zap.Duration("interval", n.cfg.Interval))
	stopAlive := n.beat.keepAlive(ctx)
	defer stopAlive()
	// The housekeeping runs beside the loop, and stops before the node's
	// last words (shutdown).
	hctx, stopHouse := context.WithCancel(ctx)
	housed := make(chan struct{})
	go func() { defer close(housed); n.passes.housekeep(hctx) }()
	defer func() { stopHouse(); <-housed }()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	waitWatch := n.claimer.watchArrivals(wctx)
	defer func() { stopWatch(); waitWatch() }()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stopHouse()
			<-housed
			n.runners.retireIdle(true)
			if n.cfg.DrainOnStop > 0 {
				n.runners.drain(n.cfg.DrainOnStop)
			}
			n.shutdown()
			return nil
		case <-t.C:
			n.passes.full(ctx)
			t.Reset(n.cfg.Interval)
		case <-n.claimer.woken():
			n.passes.claimOnly(ctx) // a slot is free: claim now
		}
	}
}

// start waits for MongoDB and ensures the protocol's indexes, retrying with
// backoff and logging the outage once.
func (n *Node) start(ctx context.Context) error {
	waited := false
	err := n.cfg.Retry.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		conflicts, err := n.store.EnsureIndexes(cctx)
		for _, c := range conflicts {
			n.log.Warn("an index exists with other options; leaving it as is", zap.String("index", c))
		}
		if err != nil && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
			// MongoDB answered, but refused (no privilege to create
			// indexes, duplicates under a unique key): the node can work
			// without the index, so say so and go on.
			n.log.Error("could not create the protocol's indexes; running without them", zap.Error(err))
			return nil
		}
		return err
	}, func(attempt int, err error) {
		if attempt == 1 {
			waited = true
			n.log.Warn("MongoDB unreachable; retrying with backoff until it answers", zap.Error(err))
		}
	})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // stopped while waiting: MongoDB's answer was the cancellation
	}
	if err != nil {
		return fmt.Errorf("wait for MongoDB: %w", err)
	}
	if waited {
		n.log.Info("MongoDB reachable")
	}
	// Claims of this node's earlier life were never handed to a runner
	// that still exists (a runner moves its claim to 0 before anything
	// else, and fails to if the claim is gone): put them back now rather
	// than orphan them after orphan_age.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The server's time, before anything is written or decided by time
	// (the passes keep it synced).
	if err := n.store.SyncClock(cctx, n.clock); err != nil {
		n.log.Warn("cannot read the database server's time; using this host's until a pass can", zap.Error(err))
	}
	released, err := n.store.ReleaseClaims(cctx, n.cfg.Name, n.now())
	switch {
	case err != nil:
		n.log.Warn("could not put back the claims of this node's earlier run; they are rescued after orphan_age", zap.Error(err))
	case released > 0:
		n.log.Warn("put back tasks this node had claimed before it restarted, never started", zap.Int64("count", released))
	}
	return nil
}

// shutdown writes the node document one last time, and the completions
// the stats collection has not had, and releases the retention lease.
func (n *Node) shutdown() {
	running := n.runners.count()
	n.beat.writeLast()
	n.passes.stats.flushLast()
	n.passes.retention.stop()
	n.log.Info("node stopped; running tasks continue in their runners", zap.Int64("runners", running))
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
	return n.passes.health()
}
