package den_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// BenchmarkCPU measures den's own CPU per Demo task: a node (`den run`,
// the den binary as a user runs it, with its defaults: runner reuse, the
// relay, JSON logs) and every runner it starts run in a cgroup of their
// own, and the cgroup's CPU counter (cgroup v1 cpuacct.usage, else cgroup
// v2 cpu.stat) is read before DEN_BENCH_TASKS Demo tasks (default 500) are
// inserted into a queue with maxthreads 4, and again once every task has
// finished and every runner has exited (so each runner's start and exit is
// counted, and the node's idle passes meanwhile). The database server runs
// in other processes, outside the cgroup, and is not counted.
//
// It reports ms of CPU per task (and its user and system parts), the
// node's idle CPU in ms per second (measured over 20 s before the tasks),
// tasks per second, and runner processes started per task (from the node's
// /metrics). It skips, saying why, where no cgroup can be made.
//
// scripts/bench.sh runs it (ONLY=cpu for it alone):
//
//	go test -run '^$' -bench BenchmarkCPU -benchtime 1x -timeout 30m ./den/
//
// The server is the embedded one (den/devdb: PostgreSQL where it is
// installed, else SQLite; DEN_BENCH_ENGINE=sqlite or postgresql picks
// one), or the MongoDB that DEN_TEST_MONGODB_URI names.
//
// DEN_BENCH_NODE_ENV adds KEY=VALUE pairs (blank-separated) to the node's
// environment, which its runners inherit: GOGC=200, GOMAXPROCS=1, ...
//
// DEN_BENCH_LOG names a file for the node's log (and its runners'),
// kept; by default it goes to a temporary directory.
//
// DEN_BENCH_PERF=1 records the tasks' run with perf (perf record -g -F
// 997) of the cgroup's processes and those they start, into
// DEN_BENCH_PERF_DATA (default perf.data in a temporary directory that is
// kept); another value is perf record's arguments instead (such as "-g -e
// sched:sched_switch").
func BenchmarkCPU(b *testing.B) {
	for range b.N {
		benchCPU(b)
	}
}

func benchCPU(b *testing.B) {
	cg, err := newCPUCgroup()
	if err != nil {
		b.Skipf("no cgroup to count den's CPU in: %v", err)
	}
	b.Cleanup(func() { cg.remove() })
	tasks := benchTasks(500)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv, db := benchDB(ctx, b)
	bin, err := dentest.BuildDen(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	qid := dentest.Queue(b, db, "demo", demo.Name, 4, "fifo")

	node, httpAddr := startCountedNode(b, cg, bin, srv)
	dentest.Eventually(b, 2*time.Minute, "the node's first pass (its node document)", func() bool {
		n, err := db.Collection("nodes").CountDocuments(ctx, bson.D{{Key: "node", Value: "cpu-bench"}})
		return err == nil && n == 1
	})
	waitStartUp(b, db, "cpu-bench")
	var perf *exec.Cmd
	if os.Getenv("DEN_BENCH_PERF") != "" {
		perf = startPerf(b, cg)
	}

	const idleWindow = 20 * time.Second
	idle0 := cg.usage(b)
	time.Sleep(idleWindow) // a window of idle CPU, measured: nothing to wait for
	idle := cg.usage(b).sub(idle0)

	u0 := cg.usage(b)
	start := time.Now()
	insertTasks(b, db, qid, tasks)
	done := int64(0)
	if !dentest.UntilBy(time.Now().Add(20*time.Minute), time.Second, func() bool {
		done, _ = db.Collection("tasks").CountDocuments(ctx, bson.D{{Key: "status", Value: 1}})
		return done >= int64(tasks)
	}) {
		b.Fatalf("only %d of %d tasks finished in 20 minutes", done, tasks)
	}
	took := time.Since(start)
	starts := scrapeCounter(b, httpAddr, "den_runner_starts_total")
	// Who spent it, while the runners are still there (idle): the node,
	// its runners' supervisors, their workers.
	b.Logf("by process (threads, CPU since each started, voluntary+involuntary context switches): %s", byRole(b, cg, node.Process.Pid))
	// Every runner ends (the last ones after runner.idle, 10 s): until
	// then the cgroup holds more than the node.
	dentest.Eventually(b, 2*time.Minute, "the runners' exit", func() bool { return len(cg.pids(b)) == 1 })
	work := cg.usage(b).sub(u0)
	if perf != nil {
		stopPerf(b, perf)
	}

	reportCPU(b, cg, tasks, took, idle, idleWindow, work, starts)
}

// cpuCgroup is a cgroup made for the benchmark, whose CPU counter counts
// every process in it.
type cpuCgroup struct {
	dir   string
	procs string // its cgroup.procs
	v2    bool
}

// cpuUsage is CPU time in nanoseconds.
type cpuUsage struct{ total, user, system int64 }

// startCountedNode starts den's binary bin as a node of srv's database,
// in cgroup cg from its first instruction, with its metrics endpoint on a
// port of its own (httpAddr); the node is killed when b ends.
func startCountedNode(b *testing.B, cg *cpuCgroup, bin string, srv costServer) (node *exec.Cmd, httpAddr string) {
	// The node's metrics endpoint, on a port of its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	httpAddr = ln.Addr().String()
	ln.Close()
	dir := b.TempDir()
	logPath := os.Getenv("DEN_BENCH_LOG")
	if logPath == "" {
		logPath = filepath.Join(dir, "node.log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logFile.Close() })
	// The shell puts itself in the cgroup and becomes the node: all the
	// node does, from its first instruction, is counted.
	node = exec.Command("/bin/sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", cg.procs,
		bin, "run", "--mongo-uri", srv.uri, "--database", srv.database, "--node", "cpu-bench", "--http-listen", httpAddr)
	node.Env = append(os.Environ(), "HOME="+dir)
	node.Env = append(node.Env, strings.Fields(os.Getenv("DEN_BENCH_NODE_ENV"))...)
	node.Stdout, node.Stderr = logFile, logFile
	if err := node.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		node.Process.Kill()
		node.Wait()
		cg.killAll()
	})
	return node, httpAddr
}

// reportCPU reports what den spent on tasks tasks that took took, idle
// what it spent in idleWindow before them, with starts runners started.
func reportCPU(b *testing.B, cg *cpuCgroup, tasks int, took time.Duration, idle cpuUsage, idleWindow time.Duration, work cpuUsage, starts float64) {
	perTask := func(ns int64) float64 { return float64(ns) / 1e6 / float64(tasks) }
	b.ReportMetric(perTask(work.total), "cpu-ms/task")
	b.ReportMetric(perTask(work.user), "user-ms/task")
	b.ReportMetric(perTask(work.system), "sys-ms/task")
	idlePerSec := float64(idle.total) / 1e6 / idleWindow.Seconds()
	b.ReportMetric(idlePerSec, "idle-cpu-ms/s")
	// The same less the node's idle rate over the drain: what the tasks
	// themselves cost, whatever the server's speed.
	b.ReportMetric((float64(work.total)/1e6-idlePerSec*took.Seconds())/float64(tasks), "less-idle-ms/task")
	b.ReportMetric(float64(tasks)/took.Seconds(), "tasks/s")
	b.ReportMetric(starts/float64(tasks), "runner-starts/task")
	b.Logf("%d Demo tasks in %.1f s; den's CPU %.0f ms (user %.0f, system %.0f), idle before %.1f ms/s; %.0f runners started; cgroup %s",
		tasks, took.Seconds(), float64(work.total)/1e6, float64(work.user)/1e6, float64(work.system)/1e6,
		float64(idle.total)/1e6/idleWindow.Seconds(), starts, cg.dir)
}

func (u cpuUsage) sub(v cpuUsage) cpuUsage {
	return cpuUsage{u.total - v.total, u.user - v.user, u.system - v.system}
}

// newCPUCgroup makes a cgroup below this process's own: in the cgroup v1
// cpuacct hierarchy if one is mounted, else in the cgroup v2 one (whose
// cpu.stat counts CPU whatever the controllers enabled).
func newCPUCgroup() (*cpuCgroup, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	// own cgroup path per hierarchy: "cpuacct" (v1) and "" (v2).
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	var v1, v2 string
	for _, line := range strings.Split(string(mounts), "\n") {
		// ... mountpoint ... - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup" && strings.Contains(","+g[2]+",", ",cpuacct,"):
			v1 = f[4]
		case g[0] == "cgroup2":
			v2 = f[4]
		}
	}
	name := fmt.Sprintf("den-cpu-bench-%d", os.Getpid())
	var errs []error
	if p, ok := paths["cpuacct"]; ok && v1 != "" {
		dir := filepath.Join(v1, p, name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			return &cpuCgroup{dir: dir, procs: filepath.Join(dir, "cgroup.procs")}, nil
		} else {
			errs = append(errs, fmt.Errorf("cgroup v1 cpuacct: %w", err))
		}
	}
	if p, ok := paths[""]; ok && v2 != "" {
		dir := filepath.Join(v2, p, name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cpu.stat")); err == nil {
				return &cpuCgroup{dir: dir, procs: filepath.Join(dir, "cgroup.procs"), v2: true}, nil
			}
			os.Remove(dir)
			errs = append(errs, fmt.Errorf("cgroup v2 %s has no cpu.stat", dir))
		} else {
			errs = append(errs, fmt.Errorf("cgroup v2: %w", err))
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("neither a cgroup v1 cpuacct hierarchy nor cgroup v2 is mounted")
	}
	return nil, errors.Join(errs...)
}

func (c *cpuCgroup) usage(b *testing.B) cpuUsage {
	b.Helper()
	if c.v2 {
		// usage_usec, user_usec, system_usec
		f, err := os.Open(filepath.Join(c.dir, "cpu.stat"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var u cpuUsage
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, _ := strings.Cut(s.Text(), " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "usage_usec":
				u.total = n * 1000
			case "user_usec":
				u.user = n * 1000
			case "system_usec":
				u.system = n * 1000
			}
		}
		return u
	}
	read := func(name string) int64 {
		raw, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return n
	}
	u := cpuUsage{total: read("cpuacct.usage")}
	// cpuacct.usage_user and _sys are in ns where the kernel has them.
	if _, err := os.Stat(filepath.Join(c.dir, "cpuacct.usage_user")); err == nil {
		u.user, u.system = read("cpuacct.usage_user"), read("cpuacct.usage_sys")
	}
	return u
}

// pids lists the processes in the cgroup.
func (c *cpuCgroup) pids(b *testing.B) []int {
	raw, err := os.ReadFile(c.procs)
	if err != nil {
		b.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(raw)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// killAll kills what is left in the cgroup (runners outlive their node by
// design).
func (c *cpuCgroup) killAll() {
	raw, _ := os.ReadFile(c.procs)
	for _, f := range strings.Fields(string(raw)) {
		if n, err := strconv.Atoi(f); err == nil {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

// remove removes the cgroup once its processes, killed, have left it
// (within 5 s; else it is left).
func (c *cpuCgroup) remove() {
	dentest.UntilBy(time.Now().Add(5*time.Second), 100*time.Millisecond, func() bool {
		if err := os.Remove(c.dir); err == nil || os.IsNotExist(err) {
			return true
		}
		c.killAll()
		return false
	})
}

// byRole sums the CPU time and context switches of the cgroup's processes
// by role: the node (pid node), the supervisors (its children) and the
// workers (theirs).
func byRole(b *testing.B, cg *cpuCgroup, node int) string {
	type proc struct {
		ppid        int
		cpu         time.Duration
		vol, nonvol int64
		threads     int
	}
	procs := map[int]proc{}
	for _, pid := range cg.pids(b) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: state ppid ...; utime
		// and stime are fields 14 and 15 of the whole line.
		_, rest, _ := strings.Cut(string(raw), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		var p proc
		p.ppid, _ = strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		p.cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
		threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		p.threads = len(threads)
		for _, t := range threads {
			raw, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					p.vol += n
				} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					p.nonvol += n
				}
			}
		}
		procs[pid] = p
	}
	type sum struct {
		n, threads  int
		cpu         time.Duration
		vol, nonvol int64
	}
	roles := map[string]*sum{"node": {}, "supervisors": {}, "workers": {}, "other": {}}
	for pid, p := range procs {
		role := "other"
		switch {
		case pid == node:
			role = "node"
		case p.ppid == node:
			role = "supervisors"
		case procs[p.ppid].ppid == node:
			role = "workers"
		}
		r := roles[role]
		r.n++
		r.cpu += p.cpu
		r.vol += p.vol
		r.nonvol += p.nonvol
		r.threads += p.threads
	}
	var parts []string
	for _, role := range []string{"node", "supervisors", "workers", "other"} {
		r := roles[role]
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d, %d threads) %s, %d+%d switches", role, r.n, r.threads, r.cpu, r.vol, r.nonvol))
		}
	}
	return strings.Join(parts, "; ")
}

// scrapeCounter reads one counter without labels from the node's /metrics.
func scrapeCounter(b *testing.B, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	b.Fatalf("no %s in the node's /metrics", name)
	return 0
}

// startPerf records the cgroup's processes (those there now and those
// they start) with call graphs.
func startPerf(b *testing.B, cg *cpuCgroup) *exec.Cmd {
	out := os.Getenv("DEN_BENCH_PERF_DATA")
	if out == "" {
		dir, err := os.MkdirTemp("", "den-cpu-perf-")
		if err != nil {
			b.Fatal(err)
		}
		out = filepath.Join(dir, "perf.data")
	}
	var pids []string
	for _, p := range cg.pids(b) {
		pids = append(pids, strconv.Itoa(p))
	}
	args := []string{"-g", "-F", "997"}
	if v := os.Getenv("DEN_BENCH_PERF"); v != "1" {
		args = strings.Fields(v)
	}
	cmd := exec.Command("perf", append(append([]string{"record"}, args...), "-o", out, "-p", strings.Join(pids, ","))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf: %v", err)
	}
	b.Logf("perf records into %s", out)
	return cmd
}

func stopPerf(b *testing.B, cmd *exec.Cmd) {
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
}
