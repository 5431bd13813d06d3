package den

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/httpserve"
	"github.com/den-project/den/den/internal/backoff"
	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/claim"
	"github.com/den-project/den/den/internal/heartbeat"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// Config is a node's configuration: the one type both den run (package
// den/config loads it from the file, the environment and flags) and a Go
// program that embeds a node fill. A zero field means its default, given
// in its comment; WithDefaults sets them, and New calls it, then refuses
// what no node runs with (validate). The keys of den's configuration that
// set a duration or a number of it, with their defaults and the ranges
// den/config holds an operator to, are Settings.
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
	// no count tells of (probe.go): tasks inserted without raising the
	// counts, in an idle queue or one the node has not read yet, and tasks
	// whose start_after has come, start at most this late (and a pass
	// later where the probe's share of the database's time puts it off).
	// Default 1s: every pass.
	ProbeEvery time.Duration
	// Retry is the backoff while MongoDB is unreachable at start.
	Retry backoff.Policy
	// Resources limits what the node gives tasks that carry
	// requested_resources (zero: what the machine has).
	Resources claim.ResourceLimits
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
	Arrivals claim.ArrivalSource
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
	// task's runner starts, with the claim's context, which ends when the
	// node is told to stop. It exists so tests can stop a node in exactly
	// that window (a hook may hold it until ctx ends); production leaves
	// it nil.
	BeforeHandOver func(ctx context.Context, taskID bson.ObjectID)
	// Signals, when set, tells a test what the node does (TestSignals);
	// production leaves it nil.
	Signals *TestSignals
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
	// DefaultProbeEvery: one query for work no count tells of.
	DefaultProbeEvery = time.Second
	// DefaultRescueEvery: the rescues of dead runners, dead nodes and
	// stale claims.
	DefaultRescueEvery = 30 * time.Second
	// DefaultRetentionEvery: the look for ended tasks past their
	// retention (only when some queue has one).
	DefaultRetentionEvery = time.Minute
)

// MinInterval is the shortest time between two of a node's passes, and
// between two runs of anything it does every so often (the Interval and
// every ...Every of Config): at 100ms an idle node makes ten passes a
// second, and at 1ns one sent about 450 commands a second. It is the
// interval key's minimum, and New refuses less.
const MinInterval = 100 * time.Millisecond

// A Setting is one key of den's configuration that sets a duration or a
// number of Config: the key as den's file writes it, the field it sets,
// its default, and the range den's configuration accepts. Settings lists
// them, in the order they are read; package den/config loads each through
// this table (its default, its range, its field), and WithDefaults fills
// Config's zero fields from it, so that each fact is written once.
type Setting struct {
	// Key is the configuration key ("interval", "runner.max_tasks").
	Key string
	// Field is the Config field it sets, as Go writes it ("Interval",
	// "Runner.MaxTasks", `Retention.Keep["failed"]`), for messages and
	// docs: Get and Set reach the field through its typed accessor.
	Field string
	Kind  SettingKind
	// Default is the value of a zero field (durations in nanoseconds).
	Default float64
	// Min and Max are the range den's configuration (file, environment,
	// flags) accepts: package den/config refuses a value outside, naming
	// the key. An embedded node (New) keeps its Go caller's values within
	// what validate allows.
	Min, Max float64
	// Least, when positive, is the least value besides 0, which has a
	// meaning of its own (retention: 0 keeps everything).
	Least float64
	// Unit is what a count or a number counts ("tasks", "MiB").
	Unit string
	// field is the typed accessor of the field, made by the constructors
	// below from a function that returns its address.
	field fieldAccess
}

// fieldAccess reads and writes one field of a Config as a float64
// (durations in nanoseconds).
type fieldAccess interface {
	get(c *Config) float64
	set(c *Config, x float64)
}

// numberAt is the address of a field of a Config that holds a duration
// or a number.
type numberAt[T time.Duration | int | int64 | float64] func(*Config) *T

func (at numberAt[T]) get(c *Config) float64    { return float64(*at(c)) }
func (at numberAt[T]) set(c *Config, x float64) { *at(c) = T(x) }

// retentionOf is the entry of a retention class in Config.Retention.Keep.
type retentionOf string

func (class retentionOf) get(c *Config) float64 {
	return float64(c.Retention.Keep[string(class)])
}

func (class retentionOf) set(c *Config, x float64) {
	if c.Retention.Keep == nil {
		c.Retention.Keep = map[string]time.Duration{}
	}
	c.Retention.Keep[string(class)] = time.Duration(x)
}

// SettingKind is what a Setting holds.
type SettingKind int

// The kinds of Setting.
const (
	KindDuration SettingKind = iota // a time.Duration
	KindCount                       // a whole number
	KindNumber                      // any number
)

// Settings are the configuration keys that set a duration or a number of
// Config, in the order den's configuration reads them (so that of two bad
// keys the same one is named).
func Settings() []Setting { return slices.Clone(settings) }

var settings = []Setting{
	// At MinInterval an idle node makes ten passes a second; at 30s a live
	// node still writes its node document twice within the shortest
	// dead_node_after.
	durationSetting("interval", "Interval", func(c *Config) *time.Duration { return &c.Interval }, DefaultInterval, MinInterval, 30*time.Second),
	// A claim's runner must have time to start and connect on a loaded
	// machine; a lost claim must not wait for days.
	durationSetting("orphan_age", "OrphanAge", func(c *Config) *time.Duration { return &c.OrphanAge }, queue.DefaultOrphanAge, 30*time.Second, 24*time.Hour),
	// Tasks and queues may set their own; this is the node's default.
	durationSetting("max_termination_time", "MaxTermination", func(c *Config) *time.Duration { return &c.MaxTermination }, queue.DefaultGrace, time.Second, time.Hour),
	// Far above interval's maximum, so that a live node is never taken for
	// dead; a dead node's tasks are rescued within a day.
	durationSetting("dead_node_after", "DeadNodeAfter", func(c *Config) *time.Duration { return &c.DeadNodeAfter }, queue.DefaultDeadNodeAfter, time.Minute, 24*time.Hour),
	durationSetting("runner.idle", "Runner.Idle", func(c *Config) *time.Duration { return &c.Runner.Idle }, DefaultRunnerIdle, time.Second, time.Hour),
	countSetting("runner.max_tasks", "Runner.MaxTasks", func(c *Config) *int { return &c.Runner.MaxTasks }, DefaultRunnerMaxTasks, 1, 100_000, "tasks"),
	// A task's processes and threads (pids.max, RLIMIT_NPROC): the
	// kernel's own pid_max ceiling.
	countSetting("runner.max_processes", "Runner.MaxProcesses", func(c *Config) *int { return &c.Runner.MaxProcesses }, DefaultRunnerMaxProcesses, 1, 1<<22, "processes"),
	// 1 KiB keeps den's own note of the cut; 1 TiB per stream is far more
	// than anything read back should be.
	countSetting("max_output", "MaxOutput", func(c *Config) *int64 { return &c.MaxOutput }, runner.DefaultMaxOutput, 1<<10, 1<<40, "bytes"),
	// 0: what the machine has (memory, cpus) or the default 60 (busy).
	numberSetting("resources.memory_mb", "Resources.MemoryMB", func(c *Config) *float64 { return &c.Resources.MemoryMB }, 0, 1<<24, "MiB"), // 16 TiB
	numberSetting("resources.cpus", "Resources.CPUs", func(c *Config) *float64 { return &c.Resources.CPUs }, 0, 8192, "cores"),             // Linux's largest NR_CPUS
	numberSetting("resources.busy_core_percent", "Resources.BusyCorePercent", func(c *Config) *float64 { return &c.Resources.BusyCorePercent }, claim.DefaultBusyCorePercent, 100, "percent"),
	// 0 keeps everything (the default); anything else is at least
	// queue.MinRetention and at most a century.
	retentionSetting(queue.RetainSucceeded),
	retentionSetting(queue.RetainFailed),
	retentionSetting(queue.RetainCancelled),
	retentionSetting(queue.RetainOrphaned),
}

func durationSetting(key, field string, at func(*Config) *time.Duration, def, min, max time.Duration) Setting {
	return Setting{Key: key, Field: field, Kind: KindDuration, Default: float64(def), Min: float64(min), Max: float64(max),
		field: numberAt[time.Duration](at)}
}

func countSetting[T int | int64](key, field string, at func(*Config) *T, def, min, max int64, unit string) Setting {
	return Setting{Key: key, Field: field, Kind: KindCount, Default: float64(def), Min: float64(min), Max: float64(max), Unit: unit,
		field: numberAt[T](at)}
}

// numberSetting is a number whose range starts at 0.
func numberSetting(key, field string, at func(*Config) *float64, def, max float64, unit string) Setting {
	return Setting{Key: key, Field: field, Kind: KindNumber, Default: def, Max: max, Unit: unit,
		field: numberAt[float64](at)}
}

// retentionSetting is retention.CLASS: Retention.Keep[CLASS].
func retentionSetting(class string) Setting {
	return Setting{Key: "retention." + class, Field: "Retention.Keep[" + strconv.Quote(class) + "]", Kind: KindDuration,
		Max: float64(queue.MaxRetention), Least: float64(queue.MinRetention), field: retentionOf(class)}
}

// Get is the setting's value in c (durations in nanoseconds).
func (s Setting) Get(c *Config) float64 { return s.field.get(c) }

// Set writes x to the setting's field of c (durations in nanoseconds).
func (s Setting) Set(c *Config, x float64) { s.field.set(c, x) }

// A timer is one of the node's own periods: the pass's interval and the
// ...Every fields, each with its default. WithDefaults fills them and
// validate holds them at MinInterval or more, from this one table.
type timer struct {
	name string
	at   interface{ of(*Config) *time.Duration }
	def  time.Duration
}

// durationAt is the address of a duration field of a Config.
type durationAt func(*Config) *time.Duration

func (at durationAt) of(c *Config) *time.Duration { return at(c) }

var timers = []timer{
	{"Interval", durationAt(func(c *Config) *time.Duration { return &c.Interval }), DefaultInterval},
	{"SweepEvery", durationAt(func(c *Config) *time.Duration { return &c.SweepEvery }), DefaultSweepEvery},
	{"RefreshEvery", durationAt(func(c *Config) *time.Duration { return &c.RefreshEvery }), DefaultRefreshEvery},
	{"ClockEvery", durationAt(func(c *Config) *time.Duration { return &c.ClockEvery }), DefaultClockEvery},
	{"ProbeEvery", durationAt(func(c *Config) *time.Duration { return &c.ProbeEvery }), DefaultProbeEvery},
	{"RescueEvery", durationAt(func(c *Config) *time.Duration { return &c.RescueEvery }), DefaultRescueEvery},
	{"RetentionEvery", durationAt(func(c *Config) *time.Duration { return &c.RetentionEvery }), DefaultRetentionEvery},
	{"ResourcesEvery", durationAt(func(c *Config) *time.Duration { return &c.ResourcesEvery }), resources.DefaultEvery},
}

// WithDefaults returns c with every zero field that has a default set to
// it: the defaults of Settings (the configuration's keys), the node's own
// timers (SweepEvery, RefreshEvery, ...), Metrics and Version. Name,
// Database and Runner.Path, which New takes from the host, the database
// and this binary, stay as they are. It changes nothing else: a negative
// or out-of-range value is New's to refuse.
func (c Config) WithDefaults() Config {
	for _, s := range settings {
		if s.Default != 0 && s.Get(&c) == 0 {
			s.Set(&c, s.Default)
		}
	}
	for _, t := range timers {
		if d := t.at.of(&c); *d == 0 {
			*d = t.def
		}
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New(nil)
	}
	if c.Version == "" {
		c.Version = moduleVersion()
	}
	return c
}

// validate refuses a configuration no node runs with, whoever made it:
// a negative duration or number (zero is the default), a timer (Interval,
// ...Every) below MinInterval, a GFS setting that is not one. It is the
// same for den run's node, whose configuration den/config has already
// held to the narrower ranges of Settings (an operator's), and for an
// embedded node, whose Go caller may go beyond them: a test runs leases of
// seconds and passes an hour apart.
func (c *Config) validate() error {
	for _, s := range settings {
		if x := s.Get(c); x < 0 {
			return fmt.Errorf("node configuration: %s (%s) is %s; it may not be negative (0 means the default, %s)",
				s.Field, s.Key, s.format(x), s.format(s.Default))
		}
	}
	for _, t := range timers {
		if d := *t.at.of(c); d < MinInterval {
			return fmt.Errorf("node configuration: %s is %s; it must be at least %s (0 means the default)", t.name, d, MinInterval)
		}
	}
	if c.GFS != "" {
		mode, err := queue.NormalizeGFS(c.GFS)
		if err != nil {
			return fmt.Errorf("node gfs setting: %w", err)
		}
		c.GFS = mode
	}
	return nil
}

// format writes x as the setting's values are written: 1s, 1024, 0.5.
func (s Setting) format(x float64) string {
	switch s.Kind {
	case KindDuration:
		return time.Duration(x).String()
	case KindCount:
		return strconv.FormatInt(int64(x), 10)
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// forNode is the configuration New runs a node with: c with its defaults
// (WithDefaults), the node named after the host and its runners told db's
// name unless c says otherwise, this binary as the task runner unless
// Runner.Path names another, validated.
func (c Config) forNode(db *mongo.Database) (Config, error) {
	c = c.WithDefaults()
	if c.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("node name: no name configured and no hostname: %w", err)
		}
		c.Name = host
	}
	if c.Database == "" {
		c.Database = db.Name()
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, c.Runner.Check()
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

// DefaultRunnerMaxTasks, DefaultRunnerIdle and DefaultRunnerMaxProcesses
// are the defaults of RunnerCommand's MaxTasks, Idle and MaxProcesses.
const (
	DefaultRunnerMaxTasks     = 100
	DefaultRunnerIdle         = 10 * time.Second
	DefaultRunnerMaxProcesses = 1024
)

// TestSignals tell a test what a node did as it does it (base.Signals).
// A test sets Config.Signals and calls Init before the node starts;
// production leaves Config.Signals nil, and signalling then costs a nil
// check.
type TestSignals = base.Signals

// TaskEnd is a task's end as its runner reported it (base.TaskEnd).
type TaskEnd = base.TaskEnd

// RunnerCommand is how a node starts a task runner (runners.Command).
type RunnerCommand = runners.Command

// NodeQueuesMax is the most queues a node lists in its node document
// (heartbeat.NodeQueuesMax).
const NodeQueuesMax = heartbeat.NodeQueuesMax

// ArrivalSource tells the node when a task is inserted, so that it
// claims at once (claim.ArrivalSource).
type ArrivalSource = claim.ArrivalSource

// ResourceLimits bound what a node offers tasks that request resources
// (claim.ResourceLimits).
type ResourceLimits = claim.ResourceLimits

// DefaultBusyCorePercent is ResourceLimits.BusyCorePercent's default.
const DefaultBusyCorePercent = claim.DefaultBusyCorePercent
