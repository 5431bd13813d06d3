package den_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
)

// BenchmarkHostileStart measures how long a good task of another queue
// waits for a free slot on a database that holds what anyone with insert
// rights can write there: two tasks of about 16 MiB in a served queue
// (large), the whole corpus of hostile tasks, queues and nodes
// (dentest.HostileTasks, HostileQueues, HostileNodes) with them
// (corpus+large). It reports the time from the node's start to the claim
// of the good task (s-to-claim), then the time from the insert of another
// good task to its claim while the node's housekeeping works through the
// corpus (s-insert-to-claim), and what /readyz said meanwhile. The node
// runs in the benchmark's process with the production intervals, on a
// server of the benchmark's own (the embedded one, or
// DEN_TEST_MONGODB_URI behind a counting proxy), whose time by command it
// logs.
//
//	go test -run '^$' -bench BenchmarkHostileStart -benchtime 1x ./den/
func BenchmarkHostileStart(b *testing.B) {
	for _, c := range []struct {
		name          string
		corpus, large bool
	}{
		{"large", false, true},
		{"corpus+large", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchHostileStart(b, c.corpus, c.large)
			}
		})
	}
}

func benchHostileStart(b *testing.B, corpus, large bool) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv, direct := benchDB(ctx, b)
	client, err := mongo.Connect(options.Client().ApplyURI(srv.uri))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Disconnect(context.Background()) })
	db := client.Database(srv.database)
	hostileQ := dentest.Queue(b, direct, "hostile", sleepPlugin, 4, "fifo")
	goodQ := dentest.Queue(b, direct, "good", sleepPlugin, 4, "fifo")
	if corpus {
		dentest.InsertHostile(b, direct.Collection("tasks"), dentest.HostileTasks(hostileQ, "gone", bson.D{{Key: "ms", Value: 1}}))
		dentest.InsertHostile(b, direct.Collection("queues"), dentest.HostileQueues(sleepPlugin))
		dentest.InsertHostile(b, direct.Collection("nodes"), dentest.HostileNodes())
	}
	if large {
		for i := range 2 {
			dentest.TaskWith(b, direct, hostileQ, bson.D{{Key: "ms", Value: 1}, {Key: "blob", Value: dentest.HugeString(16<<20 - 4<<10)}}, bson.E{Key: "big", Value: i})
		}
	}
	good := dentest.Tasks(b, direct, goodQ, sleepTasks(1, 1)...)[0]
	_, ep, tweak := withEndpoint(b, srv.uri)
	claims := make(chan bson.ObjectID, 100)
	var sig den.TestSignals
	sig.Init()
	before := srv.stats()
	b.ResetTimer()
	started := time.Now()
	nodetest.Start(b, db, "n", tweak, func(c *den.Config) {
		c.URI = srv.uri
		c.Interval, c.SweepEvery, c.RescueEvery, c.RefreshEvery, c.ProbeEvery = 0, 0, 0, 0, 0
		c.BeforeHandOver = func(_ context.Context, id bson.ObjectID) { claims <- id }
		c.Signals = &sig
	})
	var readyz []string
	// claimOf waits for the claim of id, asking /readyz every 5 s.
	claimOf := func(id bson.ObjectID) time.Time {
		for deadline := time.After(10 * time.Minute); ; {
			select {
			case got := <-claims:
				if got == id {
					return time.Now()
				}
			case <-deadline:
				b.Fatalf("task %s was not claimed in 10 minutes", id.Hex())
			case <-time.After(5 * time.Second):
				code, body := ep.get(b, "/readyz")
				readyz = append(readyz, fmt.Sprintf("%s %d %s", time.Since(started).Round(time.Second), code, strings.TrimSpace(body)))
			}
		}
	}
	claimed := claimOf(good)
	wait := claimed.Sub(started)
	atStart := srv.stats().Sub(before)
	// Another good task, once the node runs (a full pass after that
	// claim has succeeded): it waits for the next pass to read its
	// queue's counts, whatever the housekeeping is at.
	sig.PassDone.WaitFor(b, "a full pass after the first claim", func(began time.Time) bool { return began.After(claimed) })
	inserted := time.Now()
	second := dentest.Tasks(b, direct, goodQ, sleepTasks(1, 1)...)[0]
	latency := claimOf(second).Sub(inserted)
	b.StopTimer()
	fams := ep.scrape(b)
	b.ReportMetric(wait.Seconds(), "s-to-claim")
	b.ReportMetric(latency.Seconds(), "s-insert-to-claim")
	count := func(kind string) float64 { return max(value(fams, "den_loop_pass_duration_seconds", "kind", kind), 0) }
	b.Logf("good task claimed %s after the start; another %s after its insert; %v full passes and %v housekeeping steps completed by then; /readyz: %s",
		wait.Round(time.Millisecond), latency.Round(time.Millisecond), count("full"), count("housekeeping"), strings.Join(readyz, " | "))
	b.Logf("server time until the first claim: %s", busyPerTask(atStart, 1))
	b.Logf("commands until the first claim: %s", top(atStart))
}
