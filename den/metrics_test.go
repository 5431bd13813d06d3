package den_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/queue"
)

// endpoint is a node's HTTP endpoint in a test.
type endpoint struct{ base string }

// withEndpoint gives a test node metrics on a registry of its own and an
// HTTP endpoint on a free loopback port, and returns a client of uri whose
// commands those metrics count (as den run sets them up).
func withEndpoint(t testing.TB, uri string) (*mongo.Client, endpoint, func(*den.Config)) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(m.CommandMonitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return client, endpoint{"http://" + ln.Addr().String()}, func(c *den.Config) {
		c.Metrics, c.HTTP = m, ln
	}
}

func (e endpoint) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(e.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// scrape reads /metrics as Prometheus would.
func (e endpoint) scrape(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := e.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not in Prometheus text format: %v\n%s", err, body)
	}
	return fams
}

// value is the value of the sample of family name with exactly labels
// (name=value pairs), or -1 when there is none; a histogram gives its
// count.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// A node's /metrics after tasks ran: claims, completions by queue and
// status, retries, cancellations, output bytes, runner starts, running
// tasks, passes and the commands of its client all moved as the tasks did.
func TestMetricsCountWhatTheNodeDid(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	sleepQ := dentest.Queue(t, db, "sleepq", sleepPlugin, 2, "fifo")
	flakyQ := dentest.Queue(t, db, "flakyq", flakyPlugin, 2, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0.1})
	longQ := dentest.Queue(t, db, "longq", sleepPlugin, 1, "fifo")
	dentest.Tasks(t, db, sleepQ, sleepTasks(5, 10)...)
	// Cancelled before any node sees it: the sweep records -5.
	dentest.Insert(t, db.Collection("tasks"), bson.D{
		{Key: "queue", Value: sleepQ}, {Key: "status", Value: -2}, {Key: "node", Value: -1}, {Key: "cancel", Value: true},
		{Key: "parameters", Value: bson.D{{Key: "ms", Value: 1}}}, {Key: "ctime", Value: time.Now()}, {Key: "mtime", Value: time.Now()},
	})
	// Succeeds on its second attempt; fails both of its attempts.
	dentest.Tasks(t, db, flakyQ, bson.D{{Key: "succeed_on", Value: 2}}, bson.D{{Key: "succeed_on", Value: 9}})
	long := dentest.Tasks(t, db, longQ, sleepTasks(1, 600000)...)[0]
	startNode(t, db, "n", tweak)

	if code, body := ep.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// The queue of the long task shows it queued, or already claimed.
	dentest.Eventually(t, time.Minute, "den_queue_count_todo{queue=longq} read", func() bool {
		return value(ep.scrape(t), "den_queue_count_todo", "queue", "longq") >= 0
	})
	dentest.Eventually(t, 2*time.Minute, "den_tasks_running{queue=longq} 1", func() bool {
		return value(ep.scrape(t), "den_tasks_running", "queue", "longq") == 1
	})
	dentest.WaitStatus(t, db, long, 0)
	cancel(t, db, long)
	dentest.WaitStatus(t, db, long, -5)
	var fams map[string]*dto.MetricFamily
	dentest.Eventually(t, 2*time.Minute, "completions of every task counted", func() bool {
		fams = ep.scrape(t)
		return value(fams, "den_task_completions_total", "queue", "sleepq", "status", "1", "state", "succeeded") == 5 &&
			value(fams, "den_task_completions_total", "queue", "flakyq", "status", "1", "state", "succeeded") == 1 &&
			value(fams, "den_task_completions_total", "queue", "flakyq", "status", "2", "state", "failed") == 1 &&
			value(fams, "den_task_completions_total", "queue", "longq", "status", "-5", "state", "cancelled") == 1 &&
			value(fams, "den_cancellations_total", "stage", "queued") == 1
	})
	// Everything finished, so den_tasks_running reads 0 once the node
	// has let go of the tasks (once their runners were done with them).
	// den_queue_count_todo is count_todo as a pass read it after the runners'
	// decrements; count_todo counts status 0 or less, as the protocol
	// does, so the cancelled task (-5) stays in it.
	dentest.Eventually(t, time.Minute, "den_tasks_running 0 everywhere, den_queue_count_todo as the queues say", func() bool {
		fams = ep.scrape(t)
		return value(fams, "den_tasks_running", "queue", "sleepq") == 0 && value(fams, "den_tasks_running", "queue", "longq") == 0 &&
			value(fams, "den_tasks_running", "queue", "flakyq") == 0 &&
			value(fams, "den_queue_count_todo", "queue", "flakyq") == 0 && value(fams, "den_queue_count_todo", "queue", "longq") == 1
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"den_claims_total", []string{"queue", "sleepq"}, 5},
		{"den_claims_total", []string{"queue", "flakyq"}, 4}, // two tasks, two attempts each
		{"den_claims_total", []string{"queue", "longq"}, 1},
		{"den_task_retries_total", []string{"queue", "flakyq"}, 2},
		{"den_cancellations_total", []string{"stage", "running"}, 1},
		// Test::Sleep writes "slept\n" to stdout; Test::Flaky "attempt N
		// fails\n" to stderr, or "attempt N succeeds\n" to stdout.
		{"den_task_output_bytes_total", []string{"queue", "sleepq", "stream", "stdout"}, 5 * 6},
		{"den_task_output_bytes_total", []string{"queue", "sleepq", "stream", "stderr"}, 0},
		{"den_task_output_bytes_total", []string{"queue", "flakyq", "stream", "stdout"}, float64(len("attempt 2 succeeds\n"))},
		{"den_task_output_bytes_total", []string{"queue", "flakyq", "stream", "stderr"}, 3 * float64(len("attempt 1 fails\n"))},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Readiness asks for a pass within the last 3 intervals: on a loaded
	// machine one pass can take longer, so this waits for a ready reading
	// rather than expecting the scrape above to have caught one.
	dentest.Eventually(t, time.Minute, "den_ready 1 and den_database_outage 0", func() bool {
		f := ep.scrape(t)
		return value(f, "den_ready") == 1 && value(f, "den_database_outage") == 0
	})
	// Each of the 10 claims went to a runner started for it or to an idle
	// runner of its queue.
	if starts, reuses := value(fams, "den_runner_starts_total"), value(fams, "den_runner_reuses_total"); starts+reuses != 10 || starts < 1 {
		t.Errorf("den_runner_starts_total %v + den_runner_reuses_total %v, want 10 hand-overs", starts, reuses)
	}
	if got := value(fams, "den_runner_start_failures_total", "reason", "exited"); got > 0 {
		t.Errorf("den_runner_start_failures_total{reason=exited} = %v, want none", got)
	}
	// Each claim is a findAndModify; so is each heartbeat.
	if got := value(fams, "den_mongodb_commands_total", "command", "findAndModify"); got < 10 {
		t.Errorf("den_mongodb_commands_total{command=findAndModify} = %v, want at least the 10 claims", got)
	}
	if got := value(fams, "den_loop_pass_duration_seconds", "kind", "full"); got < 1 {
		t.Errorf("den_loop_pass_duration_seconds{kind=full} counted %v passes", got)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// gate forwards TCP connections to a server until it is shut, when it
// drops every connection and refuses new ones, and again once it is
// opened: MongoDB becoming unreachable and coming back, as the node sees
// it.
type gate struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	shut     bool
	conns    map[net.Conn]bool
}

func newGate(t *testing.T, upstream string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; g.setShut(true) })
	return g
}

func (g *gate) track(cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	for _, c := range cs {
		g.conns[c] = true
	}
	return true
}

func (g *gate) forward(c net.Conn) {
	up, err := net.Dial("tcp", g.upstream)
	if err != nil {
		c.Close()
		return
	}
	if !g.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

// setShut shuts the gate (dropping every connection) or opens it.
func (g *gate) setShut(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
	if shut {
		for c := range g.conns {
			c.Close()
		}
		g.conns = map[net.Conn]bool{}
	}
}

// /healthz answers 200 throughout; /readyz answers 200 while the node's
// passes succeed, 503 with a reason once MongoDB is unreachable, and 200
// again when it is back. den_database_outage follows.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	host := strings.TrimPrefix(dentest.URI(), "mongodb://")
	host, _, _ = strings.Cut(host, "/")
	g := newGate(t, host)
	uri := fmt.Sprintf("mongodb://%s/?directConnection=true&serverSelectionTimeoutMS=2000&connectTimeoutMS=2000", g.ln.Addr())
	client, ep, tweak := withEndpoint(t, uri)
	db := client.Database(dentest.DB(t).Name())
	startNode(t, db, "n", tweak, func(c *den.Config) { c.URI = uri })

	ready := func() (int, string) { return ep.get(t, "/readyz") }
	dentest.Eventually(t, time.Minute, "/readyz 200", func() bool { code, _ := ready(); return code == http.StatusOK })

	g.setShut(true)
	var body string
	dentest.Eventually(t, 2*time.Minute, "/readyz 503 while MongoDB is unreachable", func() bool {
		var code int
		code, body = ready()
		return code == http.StatusServiceUnavailable
	})
	if strings.Count(strings.TrimSpace(body), "\n") != 0 || body == "" {
		t.Errorf("/readyz reason is not one line: %q", body)
	}
	t.Logf("/readyz while unreachable: %s", strings.TrimSpace(body))
	if code, _ := ep.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while MongoDB is unreachable, want 200: the process is up", code)
	}
	dentest.Eventually(t, 2*time.Minute, "den_database_outage 1", func() bool {
		f := ep.scrape(t)
		return value(f, "den_database_outage") == 1 && value(f, "den_database_errors_total") >= 1 && value(f, "den_ready") == 0
	})

	g.setShut(false)
	dentest.Eventually(t, 2*time.Minute, "/readyz 200 once MongoDB is back", func() bool { code, _ := ready(); return code == http.StatusOK })
	if f := ep.scrape(t); value(f, "den_database_outage") != 0 || value(f, "den_ready") != 1 {
		t.Errorf("den_database_outage %v, den_ready %v after the outage, want 0 and 1", value(f, "den_database_outage"), value(f, "den_ready"))
	}
}

// A running node's document carries what it says of itself: version, pid,
// start time, and the host's resources with sane values, refreshed at
// most every ResourcesEvery (5s by default) however often it beats.
func TestNodeDocumentCarriesResources(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	before := time.Now()
	startNode(t, db, "n", func(c *den.Config) { c.Version = "v9.9.9-test"; c.Resources.MemoryMB = 777 })
	doc := func() bson.Raw {
		raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "n"}}).Raw()
		if err != nil {
			return nil
		}
		return raw
	}
	var raw bson.Raw
	dentest.Eventually(t, time.Minute, "node document with resources", func() bool {
		raw = doc()
		return raw != nil && raw.Lookup("resources").Type == bson.TypeEmbeddedDocument
	})
	if v, _ := raw.Lookup("version").StringValueOK(); v != "v9.9.9-test" {
		t.Errorf("version %q", v)
	}
	if pid, _ := raw.Lookup("pid").AsInt64OK(); pid != int64(os.Getpid()) {
		t.Errorf("pid %d, want %d", pid, os.Getpid())
	}
	started, ok := raw.Lookup("started").TimeOK()
	if !ok || started.After(before.Add(time.Second)) || before.Sub(started) > 24*time.Hour {
		t.Errorf("started %v (ok %v); the test process started before %v", started, ok, before)
	}
	res := raw.Lookup("resources").Document()
	cpus, _ := res.Lookup("cpus").AsInt64OK()
	total, _ := res.Lookup("memory_total_mb").AsInt64OK()
	avail, _ := res.Lookup("memory_available_mb").AsInt64OK()
	free, _ := res.Lookup("disk_free_mb").AsInt64OK()
	path, _ := res.Lookup("disk_path").StringValueOK()
	at, _ := res.Lookup("at").TimeOK()
	wd, _ := os.Getwd()
	if cpus < 1 || total <= 0 || avail <= 0 || avail > total || free <= 0 || path != wd || at.Before(before.Add(-time.Second)) {
		t.Errorf("resources %s (want cpus>=1, 0<available<=total, disk_free>0, disk_path %s, at after %v)", res, wd, before)
	}
	// What the node offers requests: its configured memory, the machine's
	// cores; other nodes read it with Offers.
	offers, err := queue.NewStore(db).Offers(dentest.Context(t), before.Add(-time.Minute))
	if o, ok := offers["n"]; err != nil || !ok || o.MemoryMB != 777 || o.CPUs != float64(runtime.NumCPU()) {
		t.Errorf("offers %v (%v), want n: 777 MiB, %d cpus; resources %s", offers, err, runtime.NumCPU(), res)
	}
	// Without a configured limit, no more memory than is available (plus
	// what its tasks hold, here none): a request of the machine's total
	// would never fit a claim, so it is not offered.
	startNode(t, db, "m")
	var m bson.Raw
	dentest.Eventually(t, time.Minute, "node m's offer", func() bool {
		m, _ = db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "m"}}).Raw()
		return m != nil && m.Lookup("resources", "offer").Type == bson.TypeEmbeddedDocument
	})
	offer, _ := m.Lookup("resources", "offer", "memory_mb").AsFloat64OK()
	mAvail, _ := m.Lookup("resources", "memory_available_mb").AsInt64OK()
	mTotal, _ := m.Lookup("resources", "memory_total_mb").AsInt64OK()
	if offer != float64(mAvail) || offer >= float64(mTotal) {
		t.Errorf("node m offers %v MiB; want its available memory, %d, below its total %d", offer, mAvail, mTotal)
	}
	load, ok := res.Lookup("load").ArrayOK()
	vals, _ := load.Values()
	if !ok || len(vals) != 3 {
		t.Fatalf("load %s, want 3 numbers", res.Lookup("load"))
	}
	for _, v := range vals {
		if f, ok := v.DoubleOK(); !ok || f < 0 {
			t.Errorf("load %s, want 3 non-negative doubles", res.Lookup("load"))
		}
	}
	// The test node beats every 100ms; its resources are sampled again
	// only once 5 seconds have passed: two samples are the same one or
	// at least 5s apart.
	first := at
	seen := map[time.Time]bool{first: true}
	var lastBeat time.Time
	dentest.Eventually(t, time.Minute, "a new sample after 5s", func() bool {
		raw := doc()
		a, _ := raw.Lookup("resources", "at").TimeOK()
		lastBeat, _ = raw.Lookup("timestamp").TimeOK()
		seen[a] = true
		return len(seen) > 1
	})
	for a := range seen {
		if d := a.Sub(first); a != first && d < 5*time.Second {
			t.Errorf("resources sampled again %s after the last sample, want at least 5s", d)
		}
	}
	if !lastBeat.After(first) {
		t.Errorf("heartbeat %v not after the first sample %v", lastBeat, first)
	}
}

// A reused runner's completions count under its queue's name as it is
// now: a queue renamed while a runner serves it is counted under the new
// name, as its claims are.
func TestMetricsFollowARenamedQueueInAReusedRunner(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	qid := dentest.Queue(t, db, "before", sleepPlugin, 1, "fifo")
	first := dentest.Tasks(t, db, qid, sleepTasks(1, 10)...)[0]
	startNode(t, db, "n", tweak, func(c *den.Config) { c.Runner.Idle = 5 * time.Minute })
	rawA := dentest.WaitEnded(t, db, first)
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "after"}}}})
	dentest.Eventually(t, time.Minute, "a pass has read the new name", func() bool {
		return value(ep.scrape(t), "den_tasks_running", "queue", "after") >= 0
	})
	second := dentest.Tasks(t, db, qid, sleepTasks(1, 10)...)[0]
	rawB := dentest.WaitEnded(t, db, second)
	assertReused(t, runnerInfo(t, rawA), runnerInfo(t, rawB))
	dentest.Eventually(t, time.Minute, "the second completion counted under the new name", func() bool {
		fams := ep.scrape(t)
		return value(fams, "den_task_completions_total", "queue", "after", "status", "1", "state", "succeeded") == 1 &&
			value(fams, "den_task_completions_total", "queue", "before", "status", "1", "state", "succeeded") == 1
	})
}

// With the relay off (runner.relay: false), runners still tell the node
// how their tasks ended: completions, retries and output bytes are
// counted as with the relay, for runners that serve one task and for
// runners that serve several.
func TestMetricsCountCompletionsWithoutTheRelay(t *testing.T) {
	t.Parallel()
	for _, maxTasks := range []int{1, den.DefaultRunnerMaxTasks} {
		t.Run(fmt.Sprintf("max_tasks=%d", maxTasks), func(t *testing.T) {
			t.Parallel()
			client, ep, tweak := withEndpoint(t, dentest.URI())
			db := client.Database(dentest.DB(t).Name())
			sleepQ := dentest.Queue(t, db, "sleepq", sleepPlugin, 2, "fifo")
			flakyQ := dentest.Queue(t, db, "flakyq", flakyPlugin, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0.1})
			dentest.Tasks(t, db, sleepQ, sleepTasks(3, 10)...)
			dentest.Tasks(t, db, flakyQ, bson.D{{Key: "succeed_on", Value: 2}})
			startNode(t, db, "n", tweak, func(c *den.Config) {
				c.Runner.Direct = true
				c.Runner.MaxTasks = maxTasks
			})
			dentest.Eventually(t, 2*time.Minute, "completions, retries and output bytes counted", func() bool {
				fams := ep.scrape(t)
				return value(fams, "den_task_completions_total", "queue", "sleepq", "status", "1", "state", "succeeded") == 3 &&
					value(fams, "den_task_completions_total", "queue", "flakyq", "status", "1", "state", "succeeded") == 1 &&
					value(fams, "den_task_retries_total", "queue", "flakyq") == 1 &&
					value(fams, "den_task_output_bytes_total", "queue", "sleepq", "stream", "stdout") == 3*6 &&
					value(fams, "den_task_output_bytes_total", "queue", "flakyq", "stream", "stderr") == float64(len("attempt 1 fails\n"))
			})
		})
	}
}

// A node that has not yet reached MongoDB says so: den_database_outage is
// 1 from its start until its first full pass succeeds.
func TestOutageUntilTheFirstSuccess(t *testing.T) {
	t.Parallel()
	host := strings.TrimPrefix(dentest.URI(), "mongodb://")
	host, _, _ = strings.Cut(host, "/")
	g := newGate(t, host)
	g.setShut(true)
	uri := fmt.Sprintf("mongodb://%s/?directConnection=true&serverSelectionTimeoutMS=2000&connectTimeoutMS=2000", g.ln.Addr())
	client, ep, tweak := withEndpoint(t, uri)
	db := client.Database(dentest.DB(t).Name())
	startNode(t, db, "n", tweak, func(c *den.Config) { c.URI = uri })
	var up bool
	dentest.Eventually(t, time.Minute, "/metrics served", func() bool {
		resp, err := http.Get(ep.base + "/metrics")
		if err == nil {
			resp.Body.Close()
			up = resp.StatusCode == http.StatusOK
		}
		return up
	})
	if f := ep.scrape(t); value(f, "den_database_outage") != 1 {
		t.Errorf("den_database_outage %v before the node reached MongoDB, want 1", value(f, "den_database_outage"))
	}
	g.setShut(false)
	dentest.Eventually(t, 2*time.Minute, "den_database_outage 0 once MongoDB answers", func() bool {
		return value(ep.scrape(t), "den_database_outage") == 0
	})
}

// How long runs take and how long tasks wait are histograms by queue (and
// by outcome for runs), observed as the runners report each run's end: a
// failed attempt and its successful retry are two runs, and a task
// created an hour ago waited at least an hour.
func TestMetricsRunAndWaitTimes(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	sleepQ := dentest.Queue(t, db, "sleepq", sleepPlugin, 2, "fifo")
	flakyQ := dentest.Queue(t, db, "flakyq", flakyPlugin, 1, "fifo", bson.E{Key: "max_retries", Value: 1}, bson.E{Key: "retry_delay", Value: 0.1})
	ids := dentest.Tasks(t, db, sleepQ, sleepTasks(3, 50)...)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "ctime", Value: time.Now().Add(-time.Hour)}}}})
	dentest.Tasks(t, db, flakyQ, bson.D{{Key: "succeed_on", Value: 2}})
	startNode(t, db, "n", tweak)
	sum := func(fams map[string]*dto.MetricFamily, name, queue string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetHistogram().GetSampleSum()
				}
			}
		}
		return -1
	}
	var fams map[string]*dto.MetricFamily
	dentest.Eventually(t, 2*time.Minute, "every run observed", func() bool {
		fams = ep.scrape(t)
		return value(fams, "den_task_run_seconds", "queue", "sleepq", "outcome", "succeeded") == 3 &&
			value(fams, "den_task_run_seconds", "queue", "flakyq", "outcome", "succeeded") == 1 &&
			value(fams, "den_task_run_seconds", "queue", "flakyq", "outcome", "plugin") == 1 &&
			value(fams, "den_task_wait_seconds", "queue", "sleepq") == 3 &&
			value(fams, "den_task_wait_seconds", "queue", "flakyq") == 2
	})
	if s := sum(fams, "den_task_run_seconds", "sleepq"); s < 3*0.05 {
		t.Errorf("runs of 50 ms each took %v s in all", s)
	}
	if s := sum(fams, "den_task_wait_seconds", "sleepq"); s < 3600 {
		t.Errorf("a task created an hour ago waited %v s in all", s)
	}
}

// den_queue_oldest_ready_seconds is, for each served queue with tasks to
// do, how long its oldest task that could start has been ready: a queue
// whose limit is 0 keeps a task created an hour ago waiting; a queue whose
// only task waits for its start_after has no series.
func TestMetricsOldestReady(t *testing.T) {
	t.Parallel()
	client, ep, tweak := withEndpoint(t, dentest.URI())
	db := client.Database(dentest.DB(t).Name())
	held := dentest.Queue(t, db, "heldq", sleepPlugin, 0, "fifo")
	later := dentest.Queue(t, db, "laterq", sleepPlugin, 0, "fifo")
	old := dentest.Tasks(t, db, held, sleepTasks(2, 1)...)
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: old[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "ctime", Value: time.Now().Add(-time.Hour)}}}})
	notYet := dentest.Tasks(t, db, later, sleepTasks(1, 1)...)[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: notYet}}, bson.D{{Key: "$set", Value: bson.D{{Key: "start_after", Value: time.Now().Add(time.Hour)}}}})
	startNode(t, db, "n", tweak)
	var fams map[string]*dto.MetricFamily
	dentest.Eventually(t, time.Minute, "den_queue_oldest_ready_seconds of heldq", func() bool {
		fams = ep.scrape(t)
		return value(fams, "den_queue_oldest_ready_seconds", "queue", "heldq") >= 3600
	})
	if v := value(fams, "den_queue_oldest_ready_seconds", "queue", "laterq"); v != -1 {
		t.Errorf("a queue with nothing ready has den_queue_oldest_ready_seconds %v", v)
	}
}
