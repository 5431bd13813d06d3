package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// Statuses a plugin returns. They are the protocol's (package queue), so
// that a plugin needs no other package to name them.
const (
	// StatusSucceeded: the task succeeded.
	StatusSucceeded = queue.StatusSucceeded
	// StatusFailed: the task failed. Any positive status other than
	// StatusSucceeded is a failure too, recorded as returned.
	StatusFailed = queue.StatusFailed
)

// Plugin runs tasks of the queues that name it.
//
// Run works on one task and returns its status: StatusSucceeded (1), or
// StatusFailed (2) or any other positive integer for a failure. It writes
// the task's output to env.Stdout and env.Stderr as it goes; the task
// runner stores them (in the task document or in GridFS, streaming large
// output).
//
// A non-nil error fails the task: its text is appended to stderr and the
// status becomes StatusFailed unless Run returned another failure status.
// The task is retried while it has retries left (max_retries), unless the
// error is a refusal (Refuse): then it ends at once, outcome refused.
// A status that is not positive also becomes StatusFailed, with the reason
// in stderr. A panic fails the task with the panic and its stack in stderr.
// Run must return soon after ctx is done.
//
// A task-runner process runs the tasks of one queue one after another
// (runner.max_tasks, default 100), so Run may be called for several tasks
// in one process, never two at once: keep no state from task to task
// (package variables, caches), and neither expect it to survive nor to be
// gone. A plugin that ignores ctx past its grace time is abandoned, and
// its process then takes no other task.
type Plugin interface {
	Run(ctx context.Context, task *queue.Task, env Env) (status int, err error)
}

// EnvRun is the environment variable that marks every process of a run
// (DEN_RUN=<task id>.<run token>): den finds what a dead run left by it. A
// plugin that starts programs keeps it in their environment (the runner
// sets it in its own environment, os.Getenv, for each run; an environment
// built from scratch must copy it).
const EnvRun = "DEN_RUN"

// Env is what the task runner gives a plugin besides the task. Its Record
// and Config methods work on an Env made by NewEnv (the task runner and
// package plugintest make them); on an Env literal they return an error.
type Env struct {
	// Stdout and Stderr receive the task's output. Writes are never
	// partial unless storage has failed for good. Each keeps at most the
	// task's max_output bytes: past it, writes succeed but are discarded,
	// ctx is cancelled and the task fails.
	Stdout io.Writer
	Stderr io.Writer
	// DB is the Disbatch database, for plugins that record results of
	// their own (as Demo does in reports).
	DB *mongo.Database
	// Log is the task runner's logger, with the node and task id on it.
	Log *zap.Logger
	// Grace is how long a plugin that runs processes gives them between
	// SIGTERM and SIGKILL once ctx is done (the task's
	// max_termination_time). The runner itself waits that long for Run to
	// return before it records the result without it.
	Grace time.Duration
	// MaxProcesses is the most processes, threads included, the task's
	// programs may have at once (the node's runner.max_processes, lowered
	// by the task's or queue's max_processes); 0: no limit. PidsCgroup,
	// when set, is a cgroup whose pids.max holds that limit and which the
	// program must join before it executes; else its RLIMIT_NPROC carries
	// the limit. A plugin that starts programs through den/sandbox passes
	// both on in sandbox.Spec, which does either.
	MaxProcesses int
	PidsCgroup   string
	// MemoryRequest is the memory, in bytes, the task (or its queue)
	// requests (requested_resources.memory_mb); 0: none. The node claimed
	// the task only where it has that much, and den's supervisor stops
	// the run's programs once they hold more; a plugin that limits its
	// programs' memory gives a task at least this.
	MemoryRequest int64
	// CPURequest is the CPUs (cores) the task (or its queue) requests
	// (requested_resources.cpus); 0: none. The node claimed the task only
	// where it has that many free; a plugin that limits its programs'
	// CPU gives a task at least this.
	CPURequest float64

	host *host
}

// host is what NewEnv adds to an Env: where records go, and the plugin's
// configuration section.
type host struct {
	plugin string
	config json.RawMessage
	record func(field string, value any)
}

// NewEnv returns env with its Record and Config methods connected: record
// receives each field a plugin records (after Record has refused reserved
// and malformed names), and config is the plugin's section of the node
// configuration (JSON; empty when it has none). plugin names the plugin in
// errors. It is for task runners (den's, and package plugintest), not for
// plugins.
func NewEnv(env Env, plugin string, config json.RawMessage, record func(field string, value any)) Env {
	env.host = &host{plugin: plugin, config: config, record: record}
	return env
}

// Record sets a field of the task document along with the result (such as
// exit_code), replacing what an earlier Record of the same field set. It
// refuses, with an error saying why, a field of the protocol or of den (see
// ReservedFields) and a name MongoDB would take for a path or an operator
// (empty, starting with $, or containing . or NUL), and a value BSON cannot
// encode (such as a channel): the task is not changed then.
func (e Env) Record(field string, value any) error {
	if err := CheckRecordField(field); err != nil {
		return err
	}
	if e.host == nil || e.host.record == nil {
		return fmt.Errorf("plugins: cannot record %q: this Env was not made by a task runner (plugins.NewEnv)", field)
	}
	// A value BSON cannot hold would make the task's final write fail.
	if _, err := bson.Marshal(bson.D{{Key: field, Value: value}}); err != nil {
		return fmt.Errorf("plugins: cannot record %q: the value cannot be stored in MongoDB: %w", field, err)
	}
	e.host.record(field, value)
	return nil
}

// Config decodes this plugin's section of the node configuration
// (plugins: {<plugin name>: {...}} in den's configuration file) into v,
// with JSON field names (encoding/json rules: unknown fields are ignored).
// It leaves v as is when the plugin has no section.
func (e Env) Config(v any) error {
	if e.host == nil || len(e.host.config) == 0 {
		return nil
	}
	if err := json.Unmarshal(e.host.config, v); err != nil {
		return fmt.Errorf("configuration of plugin %s: %w", e.host.plugin, err)
	}
	return nil
}

// reserved are the task fields a plugin may not Record: the protocol's
// (the task document as Disbatch writes it, and the control fields den
// reads) and den's own (runner, timed_out, leftover_processes).
var reserved = []string{
	"_id", "queue", "status", "node", "parameters", "params", "ctime", "mtime", "stdout", "stderr",
	queue.FieldCancel, queue.FieldTimeout, queue.FieldMaxRetries, queue.FieldRetryDelay,
	queue.FieldMaxTermination, queue.FieldMaxOutput, queue.FieldMaxProcesses, queue.FieldStartAfter, queue.FieldAttempts, queue.FieldHistory,
	"runner", "timed_out", "leftover_processes", "orphan_reason",
	queue.FieldOutcome, queue.FieldOutcomeReason, queue.FieldLive, queue.FieldLiveUntil,
	queue.FieldAfter, queue.FieldWaiting, queue.FieldAfterWas, queue.FieldHasDependents,
	queue.FieldEndBefore, queue.FieldExpired, queue.FieldMaxTimeouts, queue.FieldTimeouts, queue.FieldRequested,
	queue.FieldUsage, queue.FieldUsageInterval, queue.FieldMemoryRetryFactor,
}

// ReservedFields returns the task fields Env.Record refuses: the protocol's
// and den's own, sorted.
func ReservedFields() []string {
	out := slices.Clone(reserved)
	sort.Strings(out)
	return out
}

// CheckRecordField returns why Env.Record refuses field, or nil if a plugin
// may record it.
func CheckRecordField(field string) error {
	switch {
	case field == "":
		return errors.New("plugins: cannot record a field with an empty name")
	case slices.Contains(reserved, field):
		return fmt.Errorf("plugins: cannot record %q: it is a reserved field of the task (den or the protocol writes it; see plugins.ReservedFields)", field)
	case strings.HasPrefix(field, "$") || strings.ContainsAny(field, ".\x00"):
		return fmt.Errorf("plugins: cannot record %q: a field name must not start with $ or contain . or NUL (MongoDB reads those as operators or paths)", field)
	}
	return nil
}

// Refuse marks err as a refusal: the task asks for what this node does not
// allow (the command plugin: a program outside command.allow, a shell line
// where command.shell is off, a variable the task may not set) or cannot
// be run at all (parameters of the wrong shape). A refusal is permanent:
// the task runner ends the task at once, status StatusFailed and outcome
// refused, and never retries it, whatever its max_retries (another attempt
// would be refused again). Return it from Run before starting any work;
// a failure that another attempt may not meet (a program's exit code, a
// network error) is a plain error. Refuse(nil) is nil.
func Refuse(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

// Refused reports whether err, or an error it wraps, was made by Refuse.
func Refused(err error) bool {
	var r refusal
	return errors.As(err, &r)
}

// refusal is an error made by Refuse; its text is the error's.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// Gated is implemented by plugins that are off unless a node's
// configuration turns them on (such as the command plugin). A node serves
// the queues of a gated plugin only when Enabled returns true for the
// plugin's section of its configuration; other nodes leave those tasks
// queued for it.
type Gated interface {
	Enabled(config json.RawMessage) bool
}

// Preparer is implemented by plugins that have work of their own to do
// before a run, work that serves every run and is not the task's: the
// command plugin makes its list of the library directories' programs
// there (again after a package was installed, and every ten minutes). The
// runner calls Prepare with the plugin's section of the node
// configuration before the run begins, so that this work is never counted
// in the task's usage (CPU, memory samples) and never in its time limit.
// Prepare does what it can; what it could not do, Run does.
type Preparer interface {
	Prepare(ctx context.Context, config json.RawMessage)
}

// Func adapts a function to a Plugin.
type Func func(ctx context.Context, task *queue.Task, env Env) (int, error)

// Run calls f.
func (f Func) Run(ctx context.Context, task *queue.Task, env Env) (int, error) {
	return f(ctx, task, env)
}

// Registry maps plugin names to plugins. The zero value is empty and ready.
type Registry struct {
	mu      sync.RWMutex
	plugins map[string]Plugin
}

// Register adds a plugin under name. It panics if name is empty, the plugin
// is nil or the name is taken: those are programming errors found at start.
func (r *Registry) Register(name string, p Plugin) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" || p == nil {
		panic("plugins: Register needs a name and a plugin")
	}
	if _, dup := r.plugins[name]; dup {
		panic(fmt.Sprintf("plugins: Register called twice for %q", name))
	}
	if r.plugins == nil {
		r.plugins = map[string]Plugin{}
	}
	r.plugins[name] = p
}

// Lookup returns the plugin registered under name.
func (r *Registry) Lookup(name string) (Plugin, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.plugins[name]
	return p, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var defaultRegistry Registry

// Default is the registry plugin packages fill from init.
func Default() *Registry { return &defaultRegistry }

// Register adds a plugin to the Default registry; see Registry.Register.
func Register(name string, p Plugin) { defaultRegistry.Register(name, p) }
