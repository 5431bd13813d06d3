package stats

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/metrics"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// Params is what the stats recorder reads of the configuration.
type Params struct {
	Name string
}

// statsEvery is how often a node writes its samples and completions to
// the stats collection: once a minute, on the first full pass of each
// minute.
const statsEvery = time.Minute

// trimStatsEvery is how often a node deletes stats documents older than
// queue.StatsRetention, and trimStatsBatch the most it deletes then.
const (
	trimStatsEvery = time.Hour
	trimStatsBatch = 1000
)

// statsWriteTimeout bounds a flush's writes, and statsStopGrace how long
// they may go on once the node stops (flush).
const (
	statsWriteTimeout = 30 * time.Second
	statsStopGrace    = 3 * time.Second
)

// statsPending is the most minutes of completions a node keeps while it
// cannot write them (MongoDB unreachable): older ones are dropped.
const statsPending = 24 * 60

// statsRecorder keeps the time series of the status page's charts
// (queue.StatsCollection). Runners tell it when a task is handed over and
// when its runner reports the end (handed, ended: any goroutine); it adds
// up each queue's completions per minute in memory, and a full pass
// flushes them once a minute with the backlog of every queue and the
// node's own sample: one bulkWrite a minute, and, every trimStatsEvery,
// the deletion of documents past queue.StatsRetention (two commands).
type Recorder struct {
	*base.Env
	Params Params
	// host reads the host's 1-minute load average (the heartbeat's
	// sampler, cached).
	Host LoadMeter

	mu sync.Mutex
	// started maps each task handed to a runner to when.
	started map[bson.ObjectID]time.Time
	// done holds the completions not yet written, by queue and minute;
	// nodeDone this node's, by minute.
	done     map[endedKey]*queue.QueueStat
	nodeDone map[time.Time]*queue.NodeStat

	// flushed is the minute last written; trimmed when old documents
	// were last deleted; busy the queues whose backlog was last written
	// as not zero (loop only).
	flushed, trimmed time.Time
	busy             map[bson.ObjectID]bool
}

type endedKey struct {
	queue  bson.ObjectID
	minute time.Time
}

// handed notes that task was handed to a runner at at.
func (sr *Recorder) Handed(task bson.ObjectID, at time.Time) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.started == nil {
		sr.started = map[bson.ObjectID]time.Time{}
	}
	sr.started[task] = at
}

// ended counts the end a runner reported for a task of queue q (name, as
// the last pass read it) at at: status 1 succeeded, any other final status
// failed, for the queue and for this node; a retry is no end. Every run
// with a recorded end, a retried one too, is counted by how long it ran
// and its task waited to start (as the runner measured them; the run from
// its hand-over when the runner did not say).
func (sr *Recorder) Ended(q bson.ObjectID, name string, r runner.Report, at time.Time) {
	if r.Status == 0 {
		return
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.done == nil {
		sr.done = map[endedKey]*queue.QueueStat{}
		sr.nodeDone = map[time.Time]*queue.NodeStat{}
	}
	key := endedKey{q, at.Truncate(time.Minute)}
	st := sr.done[key]
	if st == nil {
		st = &queue.QueueStat{Queue: q, Name: metrics.Label(name), At: key.minute, RunTimes: queue.NewDurations(), WaitTimes: queue.NewDurations()}
		sr.done[key] = st
	}
	run, timed := r.Run, false
	if id, err := bson.ObjectIDFromHex(r.Task); err == nil {
		if began, ok := sr.started[id]; ok {
			delete(sr.started, id)
			timed = true
			if run <= 0 {
				run = max(at.Sub(began).Seconds(), 0)
			}
			if !r.Retry {
				st.Runs++
				st.RunSeconds += max(at.Sub(began).Seconds(), 0)
			}
		}
	}
	if timed || r.Run > 0 {
		st.RunTimes.Add(run)
		st.WaitTimes.Add(r.Wait)
	}
	if r.Retry {
		return
	}
	nd := sr.nodeDone[key.minute]
	if nd == nil {
		nd = &queue.NodeStat{Node: sr.Params.Name, At: key.minute, NoSample: true}
		sr.nodeDone[key.minute] = nd
	}
	if r.Status == queue.StatusSucceeded {
		st.Succeeded++
		nd.Succeeded++
	} else {
		st.Failed++
		nd.Failed++
	}
}

// due reports whether a full pass should flush now: none has in this
// minute.
func (sr *Recorder) Due(now time.Time) bool {
	return now.Truncate(statsEvery).After(sr.flushed)
}

// flush writes the completions counted so far, the backlog of every queue
// that has one, or had one when last written (queued: count_todo as the
// pass read it; running: on all nodes, as the claimer last counted them),
// and this node's sample (held: the tasks it
// holds; flushLast passes -1: no sample). Completions are forgotten only once written. Every
// trimStatsEvery it also deletes the documents past retention.
//
// A failure fails no pass (the charts are not the node's work): it is
// logged when it starts and when it clears, and the next minute's flush
// tries again with the completions kept.
//
// The write is not cut short the moment the node stops (ctx done): a
// bulkWrite of $inc cut short may have landed without its reply, and
// flushLast would then add the same completions again (seen: a node
// stopped under load counted its runs twice). It gets statsStopGrace
// more, and statsWriteTimeout in all.
func (sr *Recorder) Flush(ctx context.Context, now time.Time, queues []queue.Queue, running func(bson.ObjectID) int, held int) {
	sr.flushed = now.Truncate(statsEvery)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statsWriteTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(statsStopGrace, cancel)
		context.AfterFunc(wctx, func() { t.Stop() })
	})
	defer stop()
	ctx = wctx
	if err := sr.write(ctx, now, queues, running, held); err != nil {
		if sr.Notes.Set("stats", err.Error()) {
			sr.Log.Warn("cannot write the stats collection (the status page's charts); trying again every minute", zap.Error(err))
		}
		return
	}
	if sr.Notes.Clear("stats") {
		sr.Log.Info("the stats collection is written again")
	}
}

func (sr *Recorder) write(ctx context.Context, now time.Time, queues []queue.Queue, running func(bson.ObjectID) int, held int) error {
	pending, keys, nodes := sr.pending(now)
	nodesDone := len(nodes)
	busy := map[bson.ObjectID]bool{}
	for _, q := range queues {
		st := queue.QueueStat{Queue: q.ID, Name: metrics.Label(q.Name), At: now, Backlog: true, Running: int64(running(q.ID))}
		if q.CountTodo != nil {
			st.Queued = max(*q.CountTodo, 0)
		}
		if st.Queued > 0 || st.Running > 0 {
			busy[q.ID] = true
		} else if !sr.busy[q.ID] {
			continue // idle, and written as idle already
		}
		pending = append(pending, st)
	}
	if held >= 0 { // not the last flush
		nodes = append(nodes, queue.NodeStat{Node: sr.Params.Name, At: now, Running: int64(held), Load: sr.Host.Load1(ctx, now)})
	}
	if err := sr.Store.AddStats(ctx, pending, nodes); err != nil {
		return err
	}
	if held >= 0 {
		sr.busy = busy
	}
	sr.written(keys, pending, nodes[:nodesDone])

	if held >= 0 && now.Sub(sr.trimmed) >= trimStatsEvery {
		n, err := sr.Store.TrimStats(ctx, now.Add(-queue.StatsRetention), trimStatsBatch)
		if err != nil {
			return err
		}
		if n < trimStatsBatch {
			sr.trimmed = now
		}
		if n > 0 {
			sr.Log.Debug("old stats deleted", zap.Int64("deleted", n))
		}
	}
	return nil
}

// pending copies the completions not written yet (and their keys), the
// queues' and this node's, dropping those older than statsPending and the
// hand-overs of runners that never reported.
func (sr *Recorder) pending(now time.Time) ([]queue.QueueStat, []endedKey, []queue.NodeStat) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	pending := make([]queue.QueueStat, 0, len(sr.done))
	keys := make([]endedKey, 0, len(sr.done))
	for k, st := range sr.done {
		if now.Sub(k.minute) > statsPending*time.Minute {
			delete(sr.done, k)
			continue
		}
		c := *st
		c.RunTimes, c.WaitTimes = slices.Clone(st.RunTimes), slices.Clone(st.WaitTimes)
		pending = append(pending, c)
		keys = append(keys, k)
	}
	var nodes []queue.NodeStat
	for m, nd := range sr.nodeDone {
		if now.Sub(m) > statsPending*time.Minute {
			delete(sr.nodeDone, m)
			continue
		}
		nodes = append(nodes, *nd)
	}
	for id, at := range sr.started {
		if now.Sub(at) > queue.StatsRetention { // a runner that never reported
			delete(sr.started, id)
		}
	}
	return pending, keys, nodes
}

// written forgets what was written (pending[i] of keys[i], and nodes);
// what ended meanwhile stays for the next flush.
func (sr *Recorder) written(keys []endedKey, pending []queue.QueueStat, nodes []queue.NodeStat) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	for i, k := range keys {
		st, w := sr.done[k], pending[i]
		if st == nil {
			continue
		}
		st.Succeeded -= w.Succeeded
		st.Failed -= w.Failed
		st.Runs -= w.Runs
		st.RunSeconds -= w.RunSeconds
		for j := range w.RunTimes {
			st.RunTimes[j] -= w.RunTimes[j]
			st.WaitTimes[j] -= w.WaitTimes[j]
		}
		if st.Succeeded == 0 && st.Failed == 0 && st.Runs == 0 && st.RunTimes.Total() == 0 && st.WaitTimes.Total() == 0 {
			delete(sr.done, k)
		}
	}
	for _, w := range nodes {
		nd := sr.nodeDone[w.At]
		if nd == nil {
			continue
		}
		nd.Succeeded -= w.Succeeded
		nd.Failed -= w.Failed
		if nd.Succeeded == 0 && nd.Failed == 0 {
			delete(sr.nodeDone, w.At)
		}
	}
}

// LoadMeter reads the host's 1-minute load average (the heartbeat).
type LoadMeter interface {
	Load1(ctx context.Context, now time.Time) float64
}

// flushLast writes the completions not yet written, as the node stops,
// within a few seconds.
func (sr *Recorder) FlushLast() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := sr.write(ctx, sr.Now(), nil, nil, -1); err != nil {
		sr.Log.Warn("could not write the last completions to the stats collection at shutdown", zap.Error(err))
	}
}
