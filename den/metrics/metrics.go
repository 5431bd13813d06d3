package metrics

import (
	"context"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Metrics are one node's collectors. The zero value is not usable; call
// New.
type Metrics struct {
	reg *prometheus.Registry

	// Claims counts tasks this node claimed, by queue name.
	Claims *prometheus.CounterVec
	// Completions counts tasks whose runner (started by this node process)
	// recorded a final status, by queue name, status (1, 2, -5, ...) and
	// state, the status's name (succeeded, failed, cancelled, ...).
	Completions *prometheus.CounterVec
	// Retries counts failed attempts put back for a retry, by queue name.
	Retries *prometheus.CounterVec
	// Cancellations counts cancellations this node carried out, by stage:
	// queued (recorded -5 by the sweep), claimed (-5 before a runner
	// started), running (the runner was sent SIGTERM).
	Cancellations *prometheus.CounterVec
	// Rescues counts tasks this node rescued (retried or orphaned), by
	// reason: dead_runner, dead_node, stale_claim.
	Rescues *prometheus.CounterVec
	// PassSeconds is the duration of loop passes, by kind: full (reads,
	// heartbeat, claims) or claim (a slot freed: claims only).
	PassSeconds *prometheus.HistogramVec
	// DBErrors counts loop passes that failed on a database error.
	DBErrors prometheus.Counter
	// Outage is 1 while the node takes MongoDB for unreachable or failing
	// (from a failed pass until a full pass succeeds), else 0; it starts
	// at 1, so a node that never reached MongoDB says so.
	Outage prometheus.Gauge
	// Commands counts MongoDB commands the node's client started, by
	// command name; CommandFailures those that failed.
	Commands        *prometheus.CounterVec
	CommandFailures *prometheus.CounterVec
	// RunnerStarts counts runner processes started; RunnerStartFailures
	// those that could not be started (exec) or exited before starting
	// their task (exited), by reason.
	RunnerStarts        prometheus.Counter
	RunnerStartFailures *prometheus.CounterVec
	// RunnerReuses counts tasks handed to a runner that had already run
	// one (so no process was started for them).
	RunnerReuses prometheus.Counter
	// OutputBytes counts bytes tasks wrote, by queue name and stream
	// (stdout, stderr), as their runners report them at the end.
	OutputBytes *prometheus.CounterVec
	// Malformed counts documents this node met that cannot be what their
	// collection holds (a task whose _id is not an ObjectId, a queue
	// whose name is not a string, ...), by collection (tasks, queues) and
	// by what it did: failed (a task, with the reason in its stderr) or
	// skipped (left as it is, one warning naming it).
	Malformed *prometheus.CounterVec
	// RunSeconds is how long the runs of this node's runners took, by
	// queue name and outcome (succeeded, or who decided a run that did
	// not succeed: exit_code, timeout, ...); WaitSeconds how long their
	// tasks waited to start, from when they could first start, by queue
	// name. Both are observed when a runner reports the run's end.
	RunSeconds  *prometheus.HistogramVec
	WaitSeconds *prometheus.HistogramVec
	// OldestReady is, by queue name, how long the oldest task a claim
	// could take now has been ready, for the queues this node serves.
	OldestReady *prometheus.GaugeVec

	queues queueLabels
	// collectors are what New registered.
	collectors []prometheus.Collector

	funcsMu sync.Mutex
	running func() map[string]int
	todo    func() map[string]int64
	ready   func() error
}

// taskBuckets are the buckets of the tasks' run and wait times: from a
// tenth of a second to six hours.
var taskBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600}

// startsAt1 sets g to 1 and returns it: den_database_outage says "out"
// until the node's first full pass succeeds.
func startsAt1(g prometheus.Gauge) prometheus.Gauge {
	g.Set(1)
	return g
}

// New returns a node's collectors, registered on reg with the Go runtime
// and process collectors. reg nil means a registry of its own.
func New(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		reg: reg,
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_claims_total", Help: "Tasks this node claimed, by queue.",
		}, []string{"queue"}),
		Completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_task_completions_total", Help: "Tasks this node's runners finished, by queue, recorded status (1, 2, -5, ...) and the status's name as state (succeeded, failed, cancelled, ...).",
		}, []string{"queue", "status", "state"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_task_retries_total", Help: "Failed attempts this node's runners put back for a retry, by queue.",
		}, []string{"queue"}),
		Cancellations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_cancellations_total", Help: "Cancellations this node carried out, by stage (queued, claimed, running).",
		}, []string{"stage"}),
		Rescues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_rescues_total", Help: "Tasks this node rescued (retried or orphaned), by reason (dead_runner, dead_node, stale_claim).",
		}, []string{"reason"}),
		PassSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "den_loop_pass_duration_seconds", Help: "Duration of the node loop's passes, by kind (full, claim), and of the steps of its housekeeping (kind housekeeping).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		DBErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "den_database_errors_total", Help: "Loop passes that failed on a MongoDB error.",
		}),
		Outage: startsAt1(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "den_database_outage", Help: "1 until the node's first full pass succeeds and while it takes MongoDB for unreachable or failing, else 0.",
		})),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_mongodb_commands_total", Help: "MongoDB commands the node's client started (its own and those it relays for its runners), by command.",
		}, []string{"command"}),
		CommandFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_mongodb_command_failures_total", Help: "MongoDB commands of the node's client that failed, by command.",
		}, []string{"command"}),
		RunnerStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "den_runner_starts_total", Help: "Task runner processes this node started.",
		}),
		RunnerReuses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "den_runner_reuses_total", Help: "Tasks this node handed to a task runner that had already run a task of the same queue (no process started).",
		}),
		RunnerStartFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_runner_start_failures_total", Help: "Task runners that could not be started (exec) or exited before starting their task (exited).",
		}, []string{"reason"}),
		OutputBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_task_output_bytes_total", Help: "Bytes this node's tasks wrote, by queue and stream (stdout, stderr), as their runners report at the end.",
		}, []string{"queue", "stream"}),
		Malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "den_malformed_documents_total", Help: "Documents this node met that cannot be what their collection holds, by collection (tasks, queues) and action (failed: a task failed with the reason in its stderr; skipped: left as it is).",
		}, []string{"collection", "action"}),
		RunSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "den_task_run_seconds", Help: "How long runs of this node's tasks took, by queue and outcome (succeeded, or who decided a run that did not: exit_code, plugin, timeout, ...).",
			Buckets: taskBuckets,
		}, []string{"queue", "outcome"}),
		WaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "den_task_wait_seconds", Help: "How long this node's tasks waited to start, from when they could first start (created, start_after, or the end of the run before a retry), by queue.",
			Buckets: taskBuckets,
		}, []string{"queue"}),
		OldestReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "den_queue_oldest_ready_seconds", Help: "How long the oldest task a claim could take now has been ready (created, start_after, or the end of the run before a retry), by queue this node serves; no series for a queue with nothing ready.",
		}, []string{"queue"}),
	}
	m.collectors = []prometheus.Collector{
		m.Claims, m.Completions, m.Retries, m.Cancellations, m.Rescues, m.PassSeconds,
		m.DBErrors, m.Outage, m.Commands, m.CommandFailures, m.RunnerStarts, m.RunnerReuses, m.RunnerStartFailures, m.OutputBytes, m.Malformed,
		m.RunSeconds, m.WaitSeconds, m.OldestReady,
		funcCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	reg.MustRegister(m.collectors...)
	return m
}

// Names lists the names of the metrics the collectors export, whether or
// not they have a series yet (a histogram's series add _bucket, _sum and
// _count): what a dashboard or an alert rule may name.
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		// A Desc says its name only in its String form.
		if n := fqName.FindStringSubmatch(d.String()); n != nil {
			names = append(names, n[1])
		}
	}
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Registry is the registry the collectors are on: what /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetState sets the functions the gauges read at each scrape:
// den_tasks_running (running: the tasks the node holds, claimed or
// running under its name, by queue name), den_queue_count_todo (todo:
// each queue's count_todo as the last pass read it) and den_ready (ready:
// nil when ready). Nil functions report nothing.
func (m *Metrics) SetState(running func() map[string]int, todo func() map[string]int64, ready func() error) {
	m.funcsMu.Lock()
	defer m.funcsMu.Unlock()
	m.running, m.todo, m.ready = running, todo, ready
}

var (
	runningDesc = prometheus.NewDesc("den_tasks_running",
		"Tasks claimed or running under this node's name, by queue, as the node holds them.", []string{"queue"}, nil)
	// Disbatch's count_todo under its own name: it counts cancelled (-5)
	// and orphaned (-6) tasks too, which never run, so it is neither the
	// tasks to do nor the queued ones (den queue list counts those from
	// the tasks; a gauge of them would count a queue's tasks at every
	// scrape).
	todoDesc = prometheus.NewDesc("den_queue_count_todo",
		"Each queue's count_todo as the node's last pass read it: Disbatch's bookkeeping of the tasks with status 0 or less, cancelled and orphaned ones included (they never run); not the queued tasks.", []string{"queue"}, nil)
	// The gauge's old name, served beside the new one with the same
	// values so that dashboards and alerts written before the rename keep
	// working while their owners move them; removed in a later release.
	todoDeprecatedDesc = prometheus.NewDesc("den_queue_todo",
		"Deprecated: the old name of den_queue_count_todo, with the same values (count_todo, cancelled and orphaned tasks included); use den_queue_count_todo.", []string{"queue"}, nil)
	readyDesc = prometheus.NewDesc("den_ready",
		"1 when the node is ready (as /readyz answers 200), else 0.", nil, nil)
)

// funcCollector reports the gauges that read the node's state at scrape
// time.
type funcCollector struct{ m *Metrics }

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runningDesc
	ch <- todoDesc
	ch <- todoDeprecatedDesc
	ch <- readyDesc
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.funcsMu.Lock()
	running, todo, ready := c.m.running, c.m.todo, c.m.ready
	c.m.funcsMu.Unlock()
	if running != nil {
		by := map[string]int64{}
		for q, n := range running() {
			by[q] += int64(n)
		}
		for _, s := range capSeries(by) {
			ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(s.value), s.label)
		}
	}
	if todo != nil {
		for _, s := range capSeries(todo()) {
			ch <- prometheus.MustNewConstMetric(todoDesc, prometheus.GaugeValue, float64(s.value), s.label)
			ch <- prometheus.MustNewConstMetric(todoDeprecatedDesc, prometheus.GaugeValue, float64(s.value), s.label)
		}
	}
	if ready != nil {
		v := 0.0
		if ready() == nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v)
	}
}

// CommandMonitor returns a driver monitor counting the commands of the
// client it is set on (options.Client().SetMonitor), for
// den_mongodb_commands_total, by command name as the driver reports it
// (find, findAndModify, update, ...).
func (m *Metrics) CommandMonitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			m.Commands.WithLabelValues(e.CommandName).Inc()
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			m.CommandFailures.WithLabelValues(e.CommandName).Inc()
		},
	}
}
