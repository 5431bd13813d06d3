package den

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/internal/backoff"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Config is a node's configuration. A zero field means its default, given in
// its comment.
type Config struct {
	// Name is this node's name in the nodes collection and in the node field
	// of the tasks it claims. Default: the hostname.
	Name string
	// Interval is the time between passes of the loop. Default 1s.
	Interval time.Duration
	// OrphanAge is how long a task may stay claimed (-1) by this node
	// without a runner starting it before it is marked orphaned (-6).
	// Default 5m, as the protocol recommends.
	OrphanAge time.Duration
	// ActiveQueues and IgnoreQueues select the queues this node serves
	// (queue _ids as hex, or names). When both are empty the active
	// document of the config collection may set them.
	ActiveQueues []string
	IgnoreQueues []string
	// GFS is where task output goes: "true" (always GridFS), "false" (in
	// the task document), "auto" (in the document when it fits, else
	// GridFS). A queue's own gfs field wins. Default: the config
	// collection's, else auto.
	GFS string
	// Runner says how to start task runner processes.
	Runner RunnerCommand
	// URI and Database are handed to task runners so they reach the same
	// database as the node.
	URI      string
	Database string
	// SweepEvery is how often the node cancels queued tasks whose cancel
	// is set (the claim never takes them, so this only records -5), and
	// looks for malformed tasks in its queues (a queue field written as a
	// string, a status that is not a number) and fails them with the
	// reason in stderr. Default 15s.
	SweepEvery time.Duration
	// RefreshEvery is how often the node reads the config collection and
	// counts every node's claimed and running tasks (tasks_doing in its
	// node document). Default 10s.
	RefreshEvery time.Duration
	// ClockEvery is how often the node asks the database server its time
	// (one hello; queue.Clock): the host's monotonic clock counts between.
	// Default 1m.
	ClockEvery time.Duration
	// ProbeEvery is how often the node looks, with one query, for work
	// in the queues a claim found empty whose counts have not changed
	// since: tasks inserted without raising the counts, and tasks whose
	// start_after has come, start at most this late. Default 5s.
	ProbeEvery time.Duration
	// Retry is the backoff while MongoDB is unreachable at start.
	Retry backoff.Policy
	// Resources limits what the node gives tasks that carry
	// requested_resources (zero: what the machine has).
	Resources ResourceLimits
	// DrainOnStop, when positive, makes a stopping node wait up to that
	// long for the runners it started to finish, then stop the rest
	// (SIGTERM to their groups; each records its task as stopped) and wait
	// for them, before Run returns. For a node whose database stops with it
	// (den dev): its runners could not record anything after. Zero (den
	// run): running tasks continue in their runners, as a restarted
	// node's service expects.
	DrainOnStop time.Duration
	// MaxTermination is the default time between SIGTERM and SIGKILL when
	// a task is stopped (cancelled or timed out), for tasks and queues that
	// do not set max_termination_time. Default 10s.
	MaxTermination time.Duration
	// DeadNodeAfter is how long a node may go without writing its node
	// document before live nodes rescue its tasks. Default 1m; keep it far
	// above any node's Interval.
	DeadNodeAfter time.Duration
	// MaxOutput is the most bytes a task may write to each of stdout and
	// stderr (0: runner.DefaultMaxOutput); tasks and queues may lower it.
	MaxOutput int64
	// RescueEvery is how often the node looks for dead runners and dead
	// nodes. Default 30s (and once at start).
	RescueEvery time.Duration
	// Cgroups says whether each run gets a cgroup v2 of its own: "auto"
	// (default: when this process's cgroup is delegated to it, as under
	// systemd with Delegate=yes) or "off" (process tree only). "on" is auto
	// that fails New when no cgroup can be used.
	Cgroups string
	// PluginConfig holds each plugin's section of the configuration
	// (JSON), by plugin name; runners hand it to the plugin.
	PluginConfig map[string]json.RawMessage
	// Arrivals tells the node of tasks as they are inserted, so that a
	// free slot takes them at once. Default: a change stream on tasks,
	// where the server has them; polling otherwise (the queues' counts
	// every pass, and a probe every ProbeEvery).
	Arrivals ArrivalSource
	// Metrics are the node's Prometheus collectors; the caller makes them
	// on a registry of its own and may set their CommandMonitor on the
	// client of db. Default: collectors on a registry of their own, which
	// only HTTP serves.
	Metrics *metrics.Metrics
	// HTTP, when set, is the listener of the node's HTTP endpoint
	// (/metrics, /healthz, /readyz and HTTPMounts; see package httpserve),
	// served from the start of Run until it returns, and closed then.
	// Default: no endpoint.
	HTTP       net.Listener
	HTTPMounts []httpserve.Mount
	// Version is den's version, written to the node document. Default: the
	// version of den's module in this binary's build information.
	Version string
	// ResourcesEvery is the least time between two samples of the host's
	// resources for the node document. Default 5s.
	ResourcesEvery time.Duration
	// Retention is the node's default retention of ended tasks, for the
	// queues whose own retention field leaves a class or the action
	// unset. Zero: keep everything, as Disbatch does.
	Retention queue.Retention
	// RetentionEvery is how often the node looks for ended tasks past
	// their retention, when some queue has one (while it finds more than
	// a pass may remove, it goes on every pass). Default 1m.
	RetentionEvery time.Duration
	// OnRetentionBatch, when set, is called with true before the node
	// removes a batch of tasks past their retention and with false after.
	// It exists so tests can watch that one node at a time does it;
	// production leaves it nil.
	OnRetentionBatch func(start bool)
	// BeforeHandOver, when set, is called after each claim and before the
	// task's runner starts. It exists so tests can stop a node in exactly
	// that window; production leaves it nil.
	BeforeHandOver func(taskID bson.ObjectID)
}

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

// How often a node does what it does, unless its Config says otherwise
// (only the interval is a configuration key; the rest are the node's
// own). docs/performance.md lists them, and a test keeps the two the same.
const (
	// DefaultInterval: a full pass (the interval key).
	DefaultInterval = time.Second
	// DefaultSweepEvery: the sweeps (cancel flags, malformed tasks,
	// rewrites, unfit notes, dependencies).
	DefaultSweepEvery = 15 * time.Second
	// DefaultRefreshEvery: the config collection, and every node's running
	// counts.
	DefaultRefreshEvery = 10 * time.Second
	// DefaultClockEvery: the server's time (hello).
	DefaultClockEvery = time.Minute
	// DefaultProbeEvery: one query for work in queues found empty.
	DefaultProbeEvery = 5 * time.Second
	// DefaultRescueEvery: the rescues of dead runners, dead nodes and
	// stale claims.
	DefaultRescueEvery = 30 * time.Second
	// DefaultRetentionEvery: the look for ended tasks past their
	// retention (only when some queue has one).
	DefaultRetentionEvery = time.Minute
)

// New returns a node working on db. now may be nil (time.Now).
func New(cfg Config, db *mongo.Database, reg *plugins.Registry, log *zap.Logger, now func() time.Time) (*Node, error) {
	if cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: no name configured and no hostname: %w", err)
		}
		cfg.Name = host
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.OrphanAge <= 0 {
		cfg.OrphanAge = queue.DefaultOrphanAge
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultSweepEvery
	}
	if cfg.RefreshEvery <= 0 {
		cfg.RefreshEvery = DefaultRefreshEvery
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	if cfg.ClockEvery <= 0 {
		cfg.ClockEvery = DefaultClockEvery
	}
	if cfg.Runner.MaxTasks <= 0 {
		cfg.Runner.MaxTasks = DefaultRunnerMaxTasks
	}
	if cfg.Runner.Idle <= 0 {
		cfg.Runner.Idle = DefaultRunnerIdle
	}
	if cfg.Runner.MaxProcesses <= 0 {
		cfg.Runner.MaxProcesses = DefaultRunnerMaxProcesses
	}
	if cfg.MaxTermination <= 0 {
		cfg.MaxTermination = queue.DefaultGrace
	}
	if cfg.DeadNodeAfter <= 0 {
		cfg.DeadNodeAfter = queue.DefaultDeadNodeAfter
	}
	if cfg.RescueEvery <= 0 {
		cfg.RescueEvery = DefaultRescueEvery
	}
	if cfg.RetentionEvery <= 0 {
		cfg.RetentionEvery = DefaultRetentionEvery
	}
	if cfg.GFS != "" {
		mode, err := queue.NormalizeGFS(cfg.GFS)
		if err != nil {
			return nil, fmt.Errorf("node gfs setting: %w", err)
		}
		cfg.GFS = mode
	}
	if cfg.Database == "" {
		cfg.Database = db.Name()
	}
	if err := cfg.Runner.check(); err != nil {
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
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Version == "" {
		cfg.Version = moduleVersion()
	}
	pid, started := os.Getpid(), now()
	if p, err := process.NewProcess(int32(pid)); err == nil {
		if ms, err := p.CreateTime(); err == nil {
			started = time.UnixMilli(ms)
		}
	}
	clock := queue.NewClock(now)
	c := &common{cfg: cfg, store: queue.NewNodeStore(db), log: log, now: clock.Now, clock: clock, metrics: cfg.Metrics, notes: &notices{}}
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

// moduleVersion is the version of den's module in this binary's build
// information ("(devel)" for a build from a work tree).
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	for _, dep := range info.Deps {
		if dep.Path == denModule {
			return dep.Version
		}
	}
	if info.Main.Path == denModule && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(unknown)"
}

const denModule = "github.com/den-project/den"

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
		conflicts, err := queue.EnsureIndexes(cctx, n.store)
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
