package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BenchmarkScale is the scale check of docs/performance.md, run by
// scripts/scale.sh: den dev as a user runs it (its own data directory, its
// defaults, the demo queue at maxthreads 4), with DEN_SCALE_FINISHED
// (20,000) finished tasks of earlier runs in tasks, drains
// DEN_SCALE_TASKS (10,000) Demo tasks queued at once with den task add.
// It prints tasks per second for every 1,000 tasks and the development
// database's time per task by command (from den dev's /metrics), and
// reports the whole drain's rate and the last 1,000's against the first
// 1,000's. DEN_SCALE_ENGINE picks den dev's --engine (default: den dev's).
func BenchmarkScale(b *testing.B) {
	if testing.Short() {
		b.Skip("the scale check runs den dev for minutes")
	}
	finished := envInt(b, "DEN_SCALE_FINISHED", 20000)
	tasks := envInt(b, "DEN_SCALE_TASKS", 10000)
	slice := envInt(b, "DEN_SCALE_SLICE", 1000)
	for range b.N {
		scaleOnce(b, finished, tasks, slice)
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a number", name, v)
	}
	return n
}

// insertFinished inserts finished tasks of earlier runs into queue
// queueID, as den leaves them: status 1, the node, the output inline, the
// runner's identity and the usage; and counts them in the queue.
func insertFinished(b *testing.B, db *mongo.Database, queueID bson.ObjectID, finished int) {
	ctx := context.Background()
	docs := make([]any, 0, 1000)
	for i := range finished {
		at := time.Now().Add(-time.Hour)
		docs = append(docs, bson.D{
			{Key: "queue", Value: queueID}, {Key: "status", Value: 1}, {Key: "node", Value: "earlier"},
			{Key: "parameters", Value: bson.D{{Key: "commands", Value: "ab"}}},
			{Key: "ctime", Value: at}, {Key: "mtime", Value: at},
			{Key: "stdout", Value: "This is command 'a' for apple.\n"}, {Key: "stderr", Value: "This is command 'b' for banana.\n"},
			{Key: "runner", Value: bson.D{{Key: "token", Value: bson.NewObjectID()}, {Key: "host", Value: "earlier"}, {Key: "pid", Value: 1000 + i},
				{Key: "started", Value: at}, {Key: "beat", Value: at}}},
			{Key: "usage", Value: bson.D{{Key: "cpu_user_s", Value: 0.001}, {Key: "cpu_system_s", Value: 0.001}, {Key: "max_rss_kb", Value: 9000}, {Key: "wall_s", Value: 0.01}}},
		})
		if len(docs) == cap(docs) || i == finished-1 {
			if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
				b.Fatalf("insert finished tasks: %v", err)
			}
			docs = docs[:0]
		}
	}
	if _, err := db.Collection("queues").UpdateOne(ctx, bson.D{{Key: "_id", Value: queueID}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_total", Value: finished}}}}); err != nil {
		b.Fatal(err)
	}
}

func scaleOnce(b *testing.B, finished, tasks, slice int) {
	dir := b.TempDir()
	httpAddr := freeAddr(b)
	args := []string{"dev", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--http-listen", httpAddr}
	if e := os.Getenv("DEN_SCALE_ENGINE"); e != "" {
		args = append(args, "--engine", e)
	}
	began := time.Now()
	dev, stdout, stderr := start(b, args...)
	uri := devURI(b, stdout)
	fmt.Printf("den dev started in %.1fs: %s\n", time.Since(began).Seconds(), firstLine(stdout.String(), "den dev: database"))
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("disbatch")
	var q struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := db.Collection("queues").FindOne(ctx, bson.D{{Key: "name", Value: "demo"}}).Decode(&q); err != nil {
		b.Fatalf("the demo queue: %v", err)
	}
	denCLI(b, uri, "queue", "set", "demo", "maxthreads=4")

	began = time.Now()
	insertFinished(b, db, q.ID, finished)
	fmt.Printf("%d finished tasks inserted in %.1fs\n", finished, time.Since(began).Seconds())

	file := filepath.Join(dir, "tasks.jsonl")
	var lines strings.Builder
	for range tasks {
		lines.WriteString(`{"commands": "ab"}` + "\n")
	}
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	before := devdbSeconds(b, httpAddr)
	b.ResetTimer()
	began = time.Now()
	denCLI(b, uri, "task", "add", "demo", "--file", file)
	fmt.Printf("%d tasks added with den task add in %.1fs\n\n", tasks, time.Since(began).Seconds())

	fmt.Printf("%8s %8s %8s   %s\n", "tasks", "s", "tasks/s", "server ms per task: command collection")
	var rates []float64
	last, lastAt, lastSrv := 0, began, before
	deadline := began.Add(2 * time.Hour)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for last < tasks {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d tasks done after %s", last, tasks, time.Since(began))
		}
		if dev.ProcessState != nil {
			b.Fatalf("den dev exited: %s", stderr)
		}
		<-tick.C
		var doc struct {
			Todo int `bson:"count_todo"`
		}
		if err := db.Collection("queues").FindOne(ctx, bson.D{{Key: "_id", Value: q.ID}}).Decode(&doc); err != nil {
			b.Fatal(err)
		}
		done := tasks - doc.Todo
		if done < last+slice && done < tasks {
			continue
		}
		now, srv := time.Now(), devdbSeconds(b, httpAddr)
		n := done - last
		rate := float64(n) / now.Sub(lastAt).Seconds()
		rates = append(rates, rate)
		fmt.Printf("%8d %8.1f %8.1f   %s\n", done, now.Sub(began).Seconds(), rate, perTask(srv, lastSrv, n))
		last, lastAt, lastSrv = done, now, srv
	}
	total := time.Since(began)
	b.StopTimer()
	n, err := db.Collection("tasks").CountDocuments(ctx, bson.D{{Key: "queue", Value: q.ID}, {Key: "status", Value: 1}})
	if err != nil {
		b.Fatal(err)
	}
	if int(n) != finished+tasks {
		b.Fatalf("%d tasks succeeded in tasks, want the %d finished before and the %d new", n, finished, tasks)
	}
	fmt.Printf("\n%d tasks in %.1fs: %.1f tasks/s; the last %d at %.0f%% of the first %d's rate\n",
		tasks, total.Seconds(), float64(tasks)/total.Seconds(), slice, 100*rates[len(rates)-1]/rates[0], slice)
	b.ReportMetric(float64(tasks)/total.Seconds(), "tasks/s")
	b.ReportMetric(total.Seconds(), "drain-s")
	b.ReportMetric(rates[len(rates)-1]/rates[0], "last/first")
	stopAndWait(b, dev, syscall.SIGINT)
}

// denCLI runs a den operator command against uri.
func denCLI(b *testing.B, uri string, args ...string) {
	cmd := exec.Command(denBin(b), args...)
	cmd.Env = append(os.Environ(), "DEN_MONGO_URI="+uri)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("den %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// devdbSeconds scrapes den dev's /metrics for the database's time by
// command and collection.
func devdbSeconds(b *testing.B, addr string) map[string]float64 {
	return devdbMetric(b, addr, "den_devdb_command_seconds_total{")
}

// devdbMetric reads one of den dev's counters by command and collection
// (the metric's name and its opening brace, as /metrics prints it), keyed
// "command collection".
func devdbMetric(b *testing.B, addr, metric string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("den dev's /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, _ := strconv.ParseFloat(value, 64)
		var cmd, coll string
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "command":
				cmd = val
			case "collection":
				coll = val
			}
		}
		out[strings.TrimSpace(cmd+" "+coll)] = v
	}
	return out
}

// perTask says the server's time per task by command between two scrapes,
// largest first, and in all.
func perTask(now, before map[string]float64, tasks int) string {
	type c struct {
		key string
		ms  float64
	}
	var cs []c
	var sum float64
	for k, v := range now {
		if d := (v - before[k]) * 1000 / float64(tasks); d >= 0.05 {
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
	parts := []string{fmt.Sprintf("%.1f in all", sum)}
	for i, x := range cs {
		if i == 6 {
			break
		}
		parts = append(parts, fmt.Sprintf("%.1f %s", x.ms, x.key))
	}
	return strings.Join(parts, ", ")
}
