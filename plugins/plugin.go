package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

// Plugin runs tasks of the queues that name it.
//
// Run works on one task and returns its status: a positive integer, 1 for
// success and 2 (or any other positive number) for failure. It writes the
// task's output to env.Stdout and env.Stderr as it goes; the task runner
// stores them (in the task document or in GridFS, streaming large output).
//
// A non-nil error fails the task: its text is appended to stderr and the
// status becomes 2 unless Run returned another positive status. A status
// that is not positive also becomes 2, with the reason in stderr. A panic
// fails the task with the panic and its stack in stderr. Run must return
// soon after ctx is done.
//
// Each task runs in a task-runner process of its own, so a plugin may keep
// state in its value, but must not expect it to survive from task to task.
type Plugin interface {
	Run(ctx context.Context, task *queue.Task, env Env) (status int, err error)
}

// EnvRun is the environment variable that marks every process of a run
// (DEN_RUN=<task id>.<run token>): den finds what a dead run left by it. A
// plugin that starts programs keeps it in their environment (the runner's
// own environment has it; an environment built from scratch must copy it).
const EnvRun = "DEN_RUN"

// Env is what the task runner gives a plugin besides the task.
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
	// Record sets a field of the task document along with the result, such
	// as exit_code. Fields of the protocol and of den cannot be set.
	Record func(field string, value any)
	// Config decodes this plugin's section of the node configuration into
	// v (JSON field names); it leaves v as is when there is none.
	Config func(v any) error
}

// Gated is implemented by plugins that are off unless a node's
// configuration turns them on (such as the command plugin). A node serves
// the queues of a gated plugin only when Enabled returns true for the
// plugin's section of its configuration; other nodes leave those tasks
// queued for it.
type Gated interface {
	Enabled(config json.RawMessage) bool
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
