package den_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// BenchmarkManyQueues measures a node in a database of 10,000 queues
// inserted without their counts (as a script that creates queues with a
// driver does), the case that used to stop claiming: the time from the
// node's start to the claim of a task in another queue, the time until
// every queue's counts are filled in (DEN_BENCH_FILL=1), and the node
// document's size, the queues it lists, the size of a /metrics scrape and
// the mean full pass. DEN_BENCH_QUEUES sets the number of queues.
//
//	go test -run '^$' -bench BenchmarkManyQueues -benchtime 1x ./den/
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
	client, ep, tweak := withEndpoint(b, dentest.URI())
	db := client.Database(dentest.DB(b).Name())
	ctx := dentest.Context(b)
	docs := make([]any, 0, queues)
	for i := range queues {
		docs = append(docs, bson.D{{Key: "name", Value: fmt.Sprintf("many-%05d", i)}, {Key: "constructor", Value: sleepPlugin}, {Key: "maxthreads", Value: 1}, {Key: "sort", Value: "fifo"}})
	}
	for start := 0; start < len(docs); start += 1000 {
		if _, err := db.Collection("queues").InsertMany(ctx, docs[start:min(start+1000, len(docs))], options.InsertMany().SetOrdered(false)); err != nil {
			b.Fatal(err)
		}
	}
	target := dentest.Queue(b, db, "target", sleepPlugin, 1, "fifo")
	task := dentest.Tasks(b, db, target, sleepTasks(1, 1)...)[0]

	b.ResetTimer()
	started := time.Now()
	startNode(b, db, "n", tweak)
	dentest.Eventually(b, 10*time.Minute, "the task in another queue was claimed", func() bool {
		return dentest.CountTasks(b, db, bson.D{{Key: "_id", Value: task}, {Key: "status", Value: bson.D{{Key: "$ne", Value: -2}}}}) == 1
	})
	claimed := time.Since(started)
	// Counts are filled in a batch a pass, as fast as the server takes
	// them: on the development server, which scans the queues for every
	// update, that is 10 a pass and takes minutes for thousands of
	// queues. DEN_BENCH_FILL=1 waits for them all; by default the
	// benchmark measures 30 s after the start and reports what is left.
	var filled time.Duration
	if os.Getenv("DEN_BENCH_FILL") == "1" {
		dentest.Eventually(b, 60*time.Minute, "every queue's counts filled in", func() bool {
			time.Sleep(time.Second) // each count scans the queues on the development server
			return dentest.Count(b, db.Collection("queues"), bson.D{{Key: "count_total", Value: bson.D{{Key: "$exists", Value: false}}}}) == 0
		})
		filled = time.Since(started)
	} else {
		time.Sleep(time.Until(started.Add(30 * time.Second)))
	}
	unfilled := dentest.Count(b, db.Collection("queues"), bson.D{{Key: "count_total", Value: bson.D{{Key: "$exists", Value: false}}}})
	time.Sleep(5 * time.Second) // a few passes more
	b.StopTimer()

	raw, err := db.Collection("nodes").FindOne(ctx, bson.D{{Key: "node", Value: "n"}}).Raw()
	if err != nil {
		b.Fatal(err)
	}
	listed, _ := raw.Lookup("queues").Array().Values()
	_, body := ep.get(b, "/metrics")
	fams := ep.scrape(b)
	series := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "den_") {
			series += len(f.GetMetric())
		}
	}
	var passes, passSum float64
	if f := fams["den_loop_pass_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "full" {
				passes, passSum = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
			}
		}
	}
	b.ReportMetric(claimed.Seconds(), "s-to-claim")
	if filled > 0 {
		b.ReportMetric(filled.Seconds(), "s-to-fill-counts")
	}
	b.ReportMetric(float64(unfilled), "queues-unfilled")
	b.ReportMetric(float64(len(raw)), "node-doc-bytes")
	b.ReportMetric(float64(len(listed)), "node-doc-queues")
	b.ReportMetric(float64(len(body)), "metrics-bytes")
	b.ReportMetric(float64(series), "den-series")
	if passes > 0 {
		b.ReportMetric(passSum/passes, "s/full-pass")
	}
	b.Logf("%d queues: task claimed after %s, counts filled after %s (%d left unfilled); node document %d bytes listing %d queues (cap %d); /metrics %d bytes, %d den_ series; %v full passes, mean %.3fs",
		queues, claimed.Round(time.Millisecond), filled.Round(time.Millisecond), unfilled, len(raw), len(listed), den.NodeQueuesMax, len(body), series, passes, passSum/max(passes, 1))
}
