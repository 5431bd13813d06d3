package den_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// BenchmarkManyQueues measures a node in a database of 10,000 queues
// inserted without their counts (as a script that creates queues with a
// driver does), the case that used to stop claiming: the time from the
// node's start to the claim of a task in another queue, the time until
// every queue's counts are filled in (DEN_BENCH_FILL=1), and then, over a
// window of 30 s: the mean full pass, what /readyz says, the server's time
// by command and collection per second, and the node's memory (its peak
// RSS, and its Go heap in use at the end); and the node document's size,
// the queues it lists, the size of a /metrics scrape. The node runs in a
// process of its own with the production intervals, on a server of the
// benchmark's own (the embedded one, or DEN_TEST_MONGODB_URI behind a
// counting proxy). DEN_BENCH_QUEUES sets the number of queues.
//
//	DEN_BENCH_QUEUES=80000 go test -run '^$' -bench BenchmarkManyQueues -benchtime 1x ./den/
func BenchmarkManyQueues(b *testing.B) {
	queues := 10000
	if n, err := fmt.Sscan(os.Getenv("DEN_BENCH_QUEUES"), &queues); n != 1 || err != nil || queues <= 0 {
		queues = 10000
	}
	for range b.N {
		benchManyQueues(b, queues)
	}
}

func benchManyQueues(b *testing.B, queues int) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel) // after the database is dropped (benchDB)
	srv, db := benchDB(ctx, b)
	insertManyQueues(ctx, b, db, queues)
	target := dentest.Queue(b, db, "target", sleepPlugin, 1, "fifo")
	task := dentest.Tasks(b, db, target, sleepTasks(1, 1)...)[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ep := endpoint{"http://" + addr}

	b.ResetTimer()
	started := time.Now()
	node := benchNode(b, srv.uri, srv.database, "n", envNodeHTTP+"="+addr)
	claimed := time.Duration(0)
	if !dentest.UntilBy(started.Add(10*time.Minute), 250*time.Millisecond, func() bool {
		if dentest.CountTasks(b, db, bson.D{{Key: "_id", Value: task}, {Key: "status", Value: bson.D{{Key: "$ne", Value: -2}}}}) == 1 {
			claimed = time.Since(started)
		}
		return claimed != 0
	}) {
		b.Fatal("the task in another queue was not claimed in 10 minutes")
	}
	unfilledQuery := bson.D{{Key: "count_total", Value: bson.D{{Key: "$exists", Value: false}}}}
	// Counts are filled in a batch a round, as fast as the server takes
	// them: on the development server, which scans the queues for every
	// update, that is 10 a round and takes minutes for thousands of
	// queues. DEN_BENCH_FILL=1 waits for them all; by default the
	// benchmark measures 30 s after the start and reports what is left.
	var filled time.Duration
	if os.Getenv("DEN_BENCH_FILL") == "1" {
		// Once a second: each count scans the queues on the development
		// server.
		if !dentest.Until(time.Second, func() bool {
			return dentest.Count(b, db.Collection("queues"), unfilledQuery) == 0
		}) {
			b.Fatal("not every queue's counts were filled in by the binary's deadline")
		}
		filled = time.Since(started)
	} else {
		// A point in time to measure at, not an event: nothing to wait for.
		time.Sleep(time.Until(started.Add(30 * time.Second)))
	}
	unfilled := dentest.Count(b, db.Collection("queues"), unfilledQuery)

	// The window: passes, the server's time and /readyz.
	const window = 30 * time.Second
	n0, sum0 := ep.fullPasses(b)
	before := srv.stats()
	readyz := watchWindow(b, ep, window)
	work := srv.stats().Sub(before)
	n1, sum1 := ep.fullPasses(b)
	b.StopTimer()

	rssMiB, peakMiB := processMemory(node.Process.Pid)
	fams := ep.scrape(b)
	heapMiB := value(fams, "go_memstats_heap_inuse_bytes") / (1 << 20)
	raw, err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "n"}}).Raw()
	if err != nil {
		b.Fatal(err)
	}
	listed, _ := raw.Lookup("queues").Array().Values()
	_, body := ep.get(b, "/metrics")
	series := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "den_") {
			series += len(f.GetMetric())
		}
	}
	passes, passSeconds := n1-n0, (sum1-sum0)/max(n1-n0, 1)
	b.ReportMetric(claimed.Seconds(), "s-to-claim")
	if filled > 0 {
		b.ReportMetric(filled.Seconds(), "s-to-fill-counts")
	}
	b.ReportMetric(float64(unfilled), "queues-unfilled")
	b.ReportMetric(passSeconds, "s/full-pass")
	b.ReportMetric(peakMiB, "node-peak-RSS-MiB")
	b.ReportMetric(heapMiB, "node-heap-MiB")
	b.ReportMetric(float64(len(raw)), "node-doc-bytes")
	b.ReportMetric(float64(len(listed)), "node-doc-queues")
	b.ReportMetric(float64(len(body)), "metrics-bytes")
	b.ReportMetric(float64(series), "den-series")
	b.Logf("%d queues: task claimed after %s, counts filled after %s (%d left unfilled); over %s: %v full passes, mean %.3fs; node RSS %.0f MiB (peak %.0f), Go heap in use %.0f MiB; node document %d bytes listing %d queues (cap %d); /metrics %d bytes, %d den_ series",
		queues, claimed.Round(time.Millisecond), filled.Round(time.Millisecond), unfilled, window, passes, passSeconds, rssMiB, peakMiB, heapMiB, len(raw), len(listed), den.NodeQueuesMax, len(body), series)
	b.Logf("server time per second of the window: %s", busyPerTask(work, int(window.Seconds())))
	b.Logf("commands in the window: %s", top(work))
	b.Logf("/readyz every 5 s: %s", strings.Join(readyz, " | "))
}

// saveProfile saves the node's profile at /debug/pprof/<what> to file.
func saveProfile(b *testing.B, ep endpoint, what, file string) {
	resp, err := http.Get(ep.base + "/debug/pprof/" + what)
	if err != nil {
		b.Logf("profile %s: %v", what, err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		b.Logf("profile %s: %v", what, err)
		return
	}
	defer f.Close()
	io.Copy(f, resp.Body)
}

// insertManyQueues inserts queues queues (many-00000, ...), a thousand an
// insert, without their counts.
func insertManyQueues(ctx context.Context, b *testing.B, db *mongo.Database, queues int) {
	docs := make([]any, 0, queues)
	for i := range queues {
		docs = append(docs, bson.D{{Key: "name", Value: fmt.Sprintf("many-%05d", i)}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 1}, {Key: "sort", Value: "fifo"}})
	}
	for start := 0; start < len(docs); start += 1000 {
		if _, err := db.Collection("queues").InsertMany(ctx, docs[start:min(start+1000, len(docs))], options.InsertMany().SetOrdered(false)); err != nil {
			b.Fatal(err)
		}
	}
}

// fullPasses are how many full passes the node made, and the seconds they
// took in all (den_loop_pass_duration_seconds).
func (ep endpoint) fullPasses(b *testing.B) (n, sum float64) {
	if f := ep.scrape(b)["den_loop_pass_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "full" {
				return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// watchWindow reads the node's /readyz every 5 s for window, and, with
// DEN_BENCH_PROFILE=dir, saves its CPU profile over the window, and its
// heap at the end, there.
func watchWindow(b *testing.B, ep endpoint, window time.Duration) (readyz []string) {
	profiled := make(chan struct{})
	go func() {
		// DEN_BENCH_PROFILE=dir saves the node's CPU profile over the
		// window, and its heap at the end, there.
		defer close(profiled)
		if dir := os.Getenv("DEN_BENCH_PROFILE"); dir != "" {
			saveProfile(b, ep, "profile?seconds=25", filepath.Join(dir, "manyqueues.cpu"))
			saveProfile(b, ep, "heap", filepath.Join(dir, "manyqueues.heap"))
		}
	}()
	// A sampler's pace over a measured window: nothing to wait for.
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(5 * time.Second) {
		code, body := ep.get(b, "/readyz")
		readyz = append(readyz, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
	}
	<-profiled
	return readyz
}

// processMemory is process pid's resident memory and its peak, in MiB.
func processMemory(pid int) (rssMiB, peakMiB float64) {
	if p, err := process.NewProcess(int32(pid)); err == nil {
		if m, err := p.MemoryInfo(); err == nil {
			rssMiB = float64(m.RSS) / (1 << 20)
		}
	}
	// The peak, from the kernel (gopsutil leaves it 0 here).
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				var kb float64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				peakMiB = kb / 1024
			}
		}
	}
	return rssMiB, peakMiB
}
