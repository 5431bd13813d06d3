package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// SpecEnv is the environment variable through which a node hands a runner
// its Spec. The environment, unlike the command line, is not visible to
// other users, and the MongoDB URI may hold a password.
const SpecEnv = "DEN_TASK_RUNNER_SPEC"

// Spec is everything a runner needs to know about its task.
type Spec struct {
	URI      string `json:"uri"`
	Database string `json:"database"`
	Node     string `json:"node"`
	Task     string `json:"task"`   // the task's _id, hex
	Plugin   string `json:"plugin"` // the plugin name of its queue
	GFS      string `json:"gfs"`    // true, false or auto
	LogJSON  bool   `json:"log_json,omitempty"`
	// Grace is the node's default max_termination_time, in seconds.
	Grace float64 `json:"grace,omitempty"`
	// Beat is how often, in seconds, the runner records that it is alive
	// (default 30).
	Beat float64 `json:"beat,omitempty"`
	// DeadNodeAfter is the node's dead_node_after, in seconds: a node
	// document older than that is a dead node's (resource retries read
	// only live nodes' offers). 0: five beats.
	DeadNodeAfter float64 `json:"dead_node_after,omitempty"`
	// ClockServer and ClockMono anchor the runner's clock where its node's
	// is (queue.Clock): the database server's time at the host's
	// monotonic time ClockMono (nanoseconds). Zero: the host's wall clock.
	ClockServer time.Time `json:"clock_server,omitzero"`
	ClockMono   int64     `json:"clock_mono,omitempty"`
	// Cgroup is the node's delegated cgroup v2 directory, under which the
	// runner puts its run in a cgroup of its own; empty: none (the run is
	// contained by its process tree only).
	Cgroup string `json:"cgroup,omitempty"`
	// Pids is the node's cgroup v1 pids directory, under which the
	// supervisor gives each run's programs a cgroup of their own with
	// pids.max set; empty: none (RLIMIT_NPROC holds the limit).
	Pids string `json:"pids,omitempty"`
	// MaxProcesses is the node's runner.max_processes: the most processes
	// and threads a task's programs may have (0: no limit). A task or
	// queue may lower it.
	MaxProcesses int `json:"max_processes,omitempty"`
	// MaxOutput is the node's max_output: the most bytes a task may write
	// to each of stdout and stderr (0: DefaultMaxOutput). A task or queue
	// may lower it.
	MaxOutput int64 `json:"max_output,omitempty"`
	// Queue is the task's queue document (BSON) as the node read it when
	// it claimed the task, so that the runner need not read it again.
	// Empty: the runner reads it.
	Queue []byte `json:"queue,omitempty"`
	// PluginConfig is the plugin's section of the node configuration.
	PluginConfig json.RawMessage `json:"plugin_config,omitempty"`
	// Reuse says that the node may hand this runner further tasks of its
	// queue over its task channel (RunTask, after the runner's Done);
	// false: the runner serves this one task and exits.
	Reuse bool `json:"reuse,omitempty"`
}

// Env renders the spec as an environment entry.
func (s Spec) Env() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode runner spec: %w", err)
	}
	return SpecEnv + "=" + string(b), nil
}

// SpecFromEnv reads the spec the node passed.
func SpecFromEnv() (Spec, error) {
	var s Spec
	raw := os.Getenv(SpecEnv)
	if raw == "" {
		return s, fmt.Errorf("%s is not set: the task runner is started by den, not by hand", SpecEnv)
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return s, fmt.Errorf("decode %s: %w", SpecEnv, err)
	}
	if _, err := bson.ObjectIDFromHex(s.Task); err != nil {
		return s, fmt.Errorf("runner spec: bad task id %q: %w", s.Task, err)
	}
	if s.URI == "" || s.Database == "" || s.Node == "" {
		return s, fmt.Errorf("runner spec: uri, database and node are required")
	}
	return s, nil
}

// DefaultMaxOutput is the most a task may write to each of stdout and
// stderr when the node's configuration sets no max_output: 1 GiB.
const DefaultMaxOutput = 1 << 30
