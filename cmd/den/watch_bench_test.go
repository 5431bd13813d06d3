package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
)

// BenchmarkWatch is the check of docs/performance.md's "Watching is
// free", run by scripts/watch.sh: den dev as a user runs it, with
// DEN_WATCH_FINISHED (100,000) finished Demo tasks kept, and den web (the
// page and the DCI) beside it. It prints:
//   - each view's time (the overview, a queue's page, the task list and
//     its filters, a node's page, den status, den queue list, den task
//     list, the node's metrics, the DCI's queue list and a search), the
//     median and the slowest of DEN_WATCH_LOADS (5) loads;
//   - den dev's CPU (the node, the database and its PostgreSQL) over
//     DEN_WATCH_IDLE (60) seconds with nothing queued;
//   - a drain of DEN_WATCH_TASKS (3,000) Demo tasks added with den task
//     add, unwatched, then another watched by three watchers (the overview
//     every 2 s, the queue's page every 5 s, den status every 5 s), with
//     the watchers' times (p50, p95).
func BenchmarkWatch(b *testing.B) {
	if testing.Short() {
		b.Skip("the check runs den dev for many minutes")
	}
	w := &watchRun{b: b, finished: envInt(b, "DEN_WATCH_FINISHED", 100000), loads: envInt(b, "DEN_WATCH_LOADS", 5),
		idle: time.Duration(envInt(b, "DEN_WATCH_IDLE", 60)) * time.Second, tasks: envInt(b, "DEN_WATCH_TASKS", 3000)}
	for range b.N {
		w.once()
	}
}

// watchRun is one run of BenchmarkWatch: den dev, den web, a client.
type watchRun struct {
	b                      *testing.B
	finished, loads, tasks int
	idle                   time.Duration
	dir, uri, web, dci     string
	nodeHTTP               string
	dev, webCmd            *exec.Cmd
	db                     *mongo.Database
	demo                   bson.ObjectID
}

func (w *watchRun) once() {
	b := w.b
	w.dir = b.TempDir()
	w.nodeHTTP = freeAddr(b)
	var stdout, stderr *lockedBuffer
	w.dev, stdout, stderr = start(b, "dev", "--data", filepath.Join(w.dir, "data"), "--listen", "127.0.0.1:0", "--http-listen", w.nodeHTTP)
	w.uri = devURI(b, stdout)
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(w.uri))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(ctx)
	w.db = client.Database("disbatch")
	var q struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := w.db.Collection("queues").FindOne(ctx, bson.D{{Key: "name", Value: "demo"}}).Decode(&q); err != nil {
		b.Fatalf("the demo queue: %v", err)
	}
	w.demo = q.ID
	denCLI(b, w.uri, "queue", "set", "demo", "maxthreads=4")
	began := time.Now()
	insertFinished(b, w.db, q.ID, w.finished)
	fmt.Printf("%d finished tasks inserted in %.1fs\n", w.finished, time.Since(began).Seconds())
	w.web, w.dci = freeAddr(b), freeAddr(b)
	w.webCmd, _, _ = start(b, "web", "--mongo-uri", w.uri, "--listen", w.web, "--dci-listen", w.dci)
	w.waitHTTP("http://" + w.web + "/")
	w.waitHTTP("http://" + w.dci + "/queues")
	b.ResetTimer()
	fmt.Printf("\nviews, %d tasks kept (median / slowest of %d loads, ms):\n", w.finished, w.loads)
	for _, v := range w.views() {
		fmt.Printf("  %-48s %s\n", v.name, w.time(v))
	}
	fmt.Println()
	w.idleFor("idle")
	srv := devdbSeconds(b, w.nodeHTTP)
	use := w.cpuUse()
	unwatched := w.drain(nil)
	fmt.Printf("\ndrain of %d tasks, unwatched: %.1fs (%.1f tasks/s), load average %s\n", w.tasks, unwatched.Seconds(), float64(w.tasks)/unwatched.Seconds(), loadAverage())
	fmt.Printf("  the database's time: %s\n", perSecondMS(devdbSeconds(b, w.nodeHTTP), srv, unwatched))
	fmt.Printf("  CPU per task: %s\n", w.cpuUse().perTask(use, w.tasks))
	watchers := w.watchers()
	srv = devdbSeconds(b, w.nodeHTTP)
	use = w.cpuUse()
	watched := w.drain(watchers)
	fmt.Printf("drain of %d tasks, watched: %.1fs (%.1f tasks/s), load average %s\n", w.tasks, watched.Seconds(),
		float64(w.tasks)/watched.Seconds(), loadAverage())
	fmt.Printf("  the database's time: %s\n", perSecondMS(devdbSeconds(b, w.nodeHTTP), srv, watched))
	fmt.Printf("  CPU per task: %s\n", w.cpuUse().perTask(use, w.tasks))
	for _, wt := range watchers {
		fmt.Printf("  %-30s %d loads, p50 %d ms, p95 %d ms, failed %d\n", wt.name, len(wt.took), pct(wt.took, 50), pct(wt.took, 95), wt.failed)
	}
	// Unwatched again: the first drain also warms the node up (its
	// runners, the server's caches), and the machine drifts; the watched
	// drain is compared with the mean of the two around it.
	again := w.drain(nil)
	unwatched = (unwatched + again) / 2
	fmt.Printf("drain of %d tasks, unwatched again: %.1fs (%.1f tasks/s), load average %s\n", w.tasks, again.Seconds(), float64(w.tasks)/again.Seconds(), loadAverage())
	fmt.Printf("watched: %.2fx the unwatched rate (the mean of the two unwatched drains)\n", unwatched.Seconds()/watched.Seconds())
	w.idleFor("idle again, after the drains")
	b.StopTimer()
	b.ReportMetric(unwatched.Seconds()/watched.Seconds(), "watched/unwatched")
	if w.dev.ProcessState != nil {
		b.Fatalf("den dev exited: %s", stderr)
	}
	for _, line := range strings.Split(stdout.String()+stderr.String(), "\n") {
		if strings.Contains(line, "devdb:") {
			fmt.Println("den dev said:", line)
		}
	}
	stopAndWait(b, w.dev, syscall.SIGINT)
}

// view is one thing a user or a client looks at: a URL, or a den command.
type view struct {
	name string
	url  string
	post string // a POST body (the DCI's search)
	cli  []string
}

// views are the views and reads the issue names.
func (w *watchRun) views() []view {
	page, dci := "http://"+w.web, "http://"+w.dci
	return []view{
		{name: "overview", url: page + "/"},
		{name: "queue page", url: page + "/queues/demo"},
		{name: "task list", url: page + "/tasks"},
		{name: "task list: the queue, failed", url: page + "/tasks?queue=demo&status=failed,orphaned"},
		{name: "task list: the queue, succeeded", url: page + "/tasks?queue=demo&status=succeeded"},
		{name: "task list: a parameter", url: page + "/tasks?param=commands=ab"},
		{name: "node page", url: page + "/nodes/" + w.nodeName()},
		{name: "metrics (the node's)", url: "http://" + w.nodeHTTP + "/metrics"},
		{name: "den status", cli: []string{"status"}},
		{name: "den queue list", cli: []string{"queue", "list"}},
		{name: "den task list --limit 20", cli: []string{"task", "list", "--limit", "20"}},
		{name: "DCI GET /queues", url: dci + "/queues"},
		{name: "DCI search {queue, status 1}, limit 20", url: dci + "/tasks/search",
			post: fmt.Sprintf(`{"filter": {"queue": {"$oid": %q}, "status": 1}, "limit": 20}`, w.demo.Hex())},
		{name: "DCI search, count", url: dci + "/tasks/search",
			post: fmt.Sprintf(`{"filter": {"queue": {"$oid": %q}}, "count": 1}`, w.demo.Hex())},
	}
}

// nodeName is den dev's node's name, from its node document (written by
// the node's first pass, which a small database reaches after the views
// are first asked for).
func (w *watchRun) nodeName() string {
	var n struct {
		Node string `bson:"node"`
	}
	var err error
	if !dentest.UntilBy(time.Now().Add(time.Minute), 200*time.Millisecond, func() bool {
		err = w.db.Collection("nodes").FindOne(context.Background(), bson.D{}).Decode(&n)
		return !errors.Is(err, mongo.ErrNoDocuments)
	}) || err != nil {
		w.b.Fatalf("den dev's node document: %v", err)
	}
	return n.Node
}

// load loads a view once and returns how long it took.
func (w *watchRun) load(v view) (time.Duration, error) {
	began := time.Now()
	if v.cli != nil {
		cmd := exec.Command(denBin(w.b), v.cli...)
		cmd.Env = append(os.Environ(), "DEN_MONGO_URI="+w.uri)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("den %s: %v: %s", strings.Join(v.cli, " "), err, out)
		}
		return time.Since(began), nil
	}
	var resp *http.Response
	var err error
	if v.post != "" {
		resp, err = http.Post(v.url, "application/json", strings.NewReader(v.post))
	} else {
		resp, err = http.Get(v.url)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", v.url, resp.Status)
	}
	return time.Since(began), nil
}

// time loads a view w.loads times and says the median and the slowest.
func (w *watchRun) time(v view) string {
	var took []time.Duration
	for range w.loads {
		d, err := w.load(v)
		if err != nil {
			return "failed: " + err.Error()
		}
		took = append(took, d)
	}
	return fmt.Sprintf("%6d %6d", pct(took, 50), pct(took, 100))
}

// pct is the p-th percentile of took, in milliseconds.
func pct(took []time.Duration, p int) int64 {
	if len(took) == 0 {
		return 0
	}
	s := slices.Clone(took)
	slices.Sort(s)
	i := min((len(s)*p+99)/100, len(s)) - 1
	return s[max(i, 0)].Milliseconds()
}

// waitHTTP waits until url answers 200.
func (w *watchRun) waitHTTP(url string) {
	if !dentest.UntilBy(time.Now().Add(time.Minute), 200*time.Millisecond, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		w.b.Fatalf("%s does not answer 200", url)
	}
}

// idleFor prints what den dev and its descendants (the database's
// PostgreSQL, the runners) used of a core over w.idle with nothing
// queued, each part's share, and the database's commands meanwhile.
func (w *watchRun) idleFor(what string) {
	srv, cmds := devdbSeconds(w.b, w.nodeHTTP), devdbCommands(w.b, w.nodeHTTP)
	before := w.cpuUse()
	procsBefore := w.pgTicks()
	time.Sleep(w.idle) // a window of idle CPU, measured: nothing to wait for
	u := w.cpuUse()
	type proc struct {
		title string
		ticks int64
	}
	var busiest []proc
	for pid, now := range w.pgTicks() {
		busiest = append(busiest, proc{now.title, now.ticks - procsBefore[pid].ticks})
	}
	slices.SortFunc(busiest, func(a, b proc) int { return int(b.ticks - a.ticks) })
	for _, p := range busiest[:min(3, len(busiest))] {
		fmt.Printf("  PostgreSQL's busiest: %.1f%% %s\n", float64(p.ticks)/w.idle.Seconds(), p.title)
	}
	share := func(a, b int64) float64 { return float64(a-b) / w.idle.Seconds() } // USER_HZ 100: ticks/s is a percentage
	fmt.Printf("%s, %d tasks kept, nothing queued: den dev used %.1f%% of a core over %s (its own process %.1f%%, its PostgreSQL %.1f%%, its runners %.1f%%)\n",
		what, w.finished, share(u.dev+u.postgres+u.runners, before.dev+before.postgres+before.runners), w.idle,
		share(u.dev, before.dev), share(u.postgres, before.postgres), share(u.runners, before.runners))
	fmt.Printf("  the database's time: %s\n  its commands: %s\n", perSecondMS(devdbSeconds(w.b, w.nodeHTTP), srv, w.idle),
		perSecond(devdbCommands(w.b, w.nodeHTTP), cmds, w.idle))
}

// cpuUse is the CPU used so far, in clock ticks, by each part of a run:
// den dev's own process (the node, the proxy, FerretDB), its PostgreSQL,
// its runners, den web, the commands this benchmark ran and reaped (den
// task add, den status), and the whole machine (busy and all).
type cpuUse struct {
	dev, postgres, runners, web, commands int64
	busy, all                             int64
}

func (w *watchRun) cpuUse() cpuUse {
	var u cpuUse
	for _, p := range descendants(w.dev.Process.Pid) {
		n := procTicks(p)
		switch comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); {
		case p == w.dev.Process.Pid:
			u.dev += n
		case strings.HasPrefix(string(comm), "postgres"):
			u.postgres += n
		default:
			u.runners += n
		}
	}
	u.web = treeTicks(w.webCmd.Process.Pid)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		u.commands = (ru.Utime.Nano() + ru.Stime.Nano()) / 1e7
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			n, _ := strconv.ParseInt(f, 10, 64)
			u.all += n
			if i != 3 && i != 4 { // idle, iowait
				u.busy += n
			}
		}
	}
	return u
}

// perTask says how many milliseconds of CPU each part took per task
// between before and u, and how busy the machine was.
func (u cpuUse) perTask(before cpuUse, tasks int) string {
	ms := func(a, b int64) float64 { return float64(a-b) * 10 / float64(tasks) }
	return fmt.Sprintf("den dev %.1f ms, its PostgreSQL %.1f ms, its runners %.1f ms, den web %.1f ms, commands run %.1f ms; the machine %.0f%% busy",
		ms(u.dev, before.dev), ms(u.postgres, before.postgres), ms(u.runners, before.runners), ms(u.web, before.web),
		ms(u.commands, before.commands), 100*float64(u.busy-before.busy)/float64(max(u.all-before.all, 1)))
}

// pgTicks is the CPU ticks of each PostgreSQL process of den dev, with
// its title (what the process does: a backend's user, database and
// state, the autovacuum launcher, the checkpointer).
func (w *watchRun) pgTicks() map[int]struct {
	title string
	ticks int64
} {
	out := map[int]struct {
		title string
		ticks int64
	}{}
	for _, p := range descendants(w.dev.Process.Pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if !strings.HasPrefix(string(comm), "postgres") {
			continue
		}
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out[p] = struct {
			title string
			ticks int64
		}{strings.TrimSpace(strings.ReplaceAll(string(title), "\x00", " ")), procTicks(p)}
	}
	return out
}

// procTicks is the user and system CPU time, in clock ticks, of one
// process and of the children it reaped.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var total int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(f[i], 10, 64)
		total += n
	}
	return total
}

// treeTicks is the user and system CPU time, in clock ticks, of pid and
// its descendants that are alive (and of the children they reaped).
func treeTicks(pid int) int64 {
	var total int64
	for _, p := range descendants(pid) {
		total += procTicks(p)
	}
	return total
}

// descendants is pid and every process below it. A process's children
// are listed under the thread that started each (Go starts them from
// any of its threads), so every thread's list is read.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, file := range threads {
			b, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// watcher loads one view every so often during a drain.
type watcher struct {
	name   string
	v      view
	every  time.Duration
	mu     sync.Mutex
	took   []time.Duration
	failed int
}

// watchers are the three: the overview every 2 s, the queue's
// page every 5 s, den status every 5 s.
func (w *watchRun) watchers() []*watcher {
	vs := w.views()
	return []*watcher{{name: "overview every 2 s", v: vs[0], every: 2 * time.Second},
		{name: "queue page every 5 s", v: vs[1], every: 5 * time.Second},
		{name: "den status every 5 s", v: vs[8], every: 5 * time.Second}}
}

// watch loads its view every w.every until ctx ends.
func (wt *watcher) watch(ctx context.Context, run *watchRun) {
	t := time.NewTicker(wt.every)
	defer t.Stop()
	for {
		d, err := run.load(wt.v)
		wt.mu.Lock()
		if err != nil {
			wt.failed++
		} else {
			wt.took = append(wt.took, d)
		}
		wt.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// drain adds w.tasks Demo tasks with den task add and waits until the
// queue has none to do, with the watchers loading their views meanwhile;
// it returns how long that took.
func (w *watchRun) drain(watchers []*watcher) time.Duration {
	file := filepath.Join(w.dir, "tasks.jsonl")
	var lines strings.Builder
	for range w.tasks {
		lines.WriteString(`{"commands": "ab"}` + "\n")
	}
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		w.b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, wt := range watchers {
		wg.Add(1)
		go func() { defer wg.Done(); wt.watch(ctx, w) }()
	}
	defer func() { stop(); wg.Wait() }()
	began := time.Now()
	denCLI(w.b, w.uri, "task", "add", "demo", "--file", file)
	var doc struct {
		Todo int `bson:"count_todo"`
	}
	if !dentest.UntilBy(began.Add(time.Hour), 500*time.Millisecond, func() bool {
		if err := w.db.Collection("queues").FindOne(context.Background(), bson.D{{Key: "_id", Value: w.demo}}).Decode(&doc); err != nil {
			w.b.Fatal(err)
		}
		return doc.Todo == 0
	}) {
		w.b.Fatalf("%d tasks still to do after an hour", doc.Todo)
	}
	return time.Since(began)
}

// perSecondMS says how many milliseconds of the database's time a second
// each command took between two reads of devdbSeconds, largest first.
func perSecondMS(now, before map[string]float64, over time.Duration) string {
	type c struct {
		key string
		ms  float64
	}
	var cs []c
	var sum float64
	for k, v := range now {
		if d := (v - before[k]) * 1000 / over.Seconds(); d >= 0.1 {
			cs = append(cs, c{k, d})
			sum += d
		}
	}
	slices.SortFunc(cs, func(a, b c) int {
		switch {
		case a.ms > b.ms:
			return -1
		case a.ms < b.ms:
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	parts := make([]string, 0, len(cs))
	for _, x := range cs {
		parts = append(parts, fmt.Sprintf("%.1f %s", x.ms, x.key))
	}
	return fmt.Sprintf("%.1f ms/s: %s", sum, strings.Join(parts, ", "))
}

// loadAverage is the machine's load average (1, 5, 15 minutes), as
// /proc/loadavg says: the figures move with it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
