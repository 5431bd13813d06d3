package web

import (
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// queuePageCharts are a queue's charts on its page over Range: what
// finished (its throughput), its backlog, and how long its tasks waited
// and ran (p50, p95 per step); with what they add up to over the range.
type queuePageCharts struct {
	Range  chartRange
	Ranges []chartRange
	Base   string

	Finished, Backlog, Wait, Run chartView
	Sum                          rangeSum
}

// rangeSum is what a queue's steps add up to over a range: the tasks
// finished, per minute, and the wait and run times' p50 and p95 (as
// text; "-" when none was counted).
type rangeSum struct {
	Succeeded, Failed int64
	PerMinute         string
	WaitP50, WaitP95  string
	RunP50, RunP95    string
	Timed             int64 // runs counted by time
}

// queuePageChartsOf draws queue q's charts over r from its stats
// documents of r's step (points).
func queuePageChartsOf(r chartRange, now time.Time, q bson.ObjectID, points []queue.StatPoint) queuePageCharts {
	times := r.buckets(now)
	byQueue, _ := foldStats(times, points)
	v := byQueue[q]
	if v == nil {
		v = newQueueSeries(len(times))
	}
	v.openStep(r)
	c := queuePageCharts{Range: r, Ranges: chartRanges, Base: queueURL(q.Hex())}
	c.Finished = newChart("finished "+r.Label, r, times,
		series{Name: "succeeded", Color: colorOK, Values: v.ok}, series{Name: "failed", Color: colorBad, Values: v.bad})
	c.Backlog = newChart("backlog", r, times,
		series{Name: "count_todo", Color: colorTodo, Values: v.todo}, series{Name: "running", Color: colorRun, Values: v.run})
	c.Wait = newChart("wait before start (s)", r, times,
		series{Name: "p50", Color: colorP50, Values: quantiles(v.waits, 0.5)}, series{Name: "p95", Color: colorP95, Values: quantiles(v.waits, 0.95), Dashed: true})
	c.Run = newChart("run time (s)", r, times,
		series{Name: "p50", Color: colorP50, Values: quantiles(v.runs, 0.5)}, series{Name: "p95", Color: colorP95, Values: quantiles(v.runs, 0.95), Dashed: true})

	runs, waits := queue.NewDurations(), queue.NewDurations()
	for i := range times {
		if !math.IsNaN(v.ok[i]) {
			c.Sum.Succeeded += int64(v.ok[i])
			c.Sum.Failed += int64(v.bad[i])
		}
		runs.AddAll(v.runs[i])
		waits.AddAll(v.waits[i])
	}
	c.Sum.PerMinute = fmt.Sprintf("%.1f/min", float64(c.Sum.Succeeded+c.Sum.Failed)/r.Span.Minutes())
	c.Sum.Timed = runs.Total()
	c.Sum.WaitP50, c.Sum.WaitP95 = quantileText(waits, 0.5), quantileText(waits, 0.95)
	c.Sum.RunP50, c.Sum.RunP95 = quantileText(runs, 0.5), quantileText(runs, 0.95)
	return c
}

// quantiles is the q-quantile of each step's times, in seconds to the
// millisecond; NaN (a gap) where none was counted.
func quantiles(steps []queue.Durations, q float64) []float64 {
	out := make([]float64, len(steps))
	for i, d := range steps {
		out[i] = math.NaN()
		if v, ok := d.Quantile(q); ok {
			out[i] = math.Round(v*1000) / 1000
		}
	}
	return out
}

// quantileText is d's q-quantile as people read it, or "-".
func quantileText(d queue.Durations, q float64) string {
	v, ok := d.Quantile(q)
	if !ok {
		return "-"
	}
	return tookText(time.Duration(v * float64(time.Second)))
}

// nodePageCharts are a node's charts on its page over Range, and the
// tasks it finished over it.
type nodePageCharts struct {
	Range  chartRange
	Ranges []chartRange
	Base   string

	Charts            nodeCharts
	Succeeded, Failed int64
}

// nodePageChartsOf draws node name's charts over r from its stats
// documents of r's step (points).
func nodePageChartsOf(r chartRange, now time.Time, name string, points []queue.StatPoint) nodePageCharts {
	times := r.buckets(now)
	_, byNode := foldStats(times, points)
	c := nodePageCharts{Range: r, Ranges: chartRanges, Base: nodeURL(name)}
	c.Charts = nodeChartsOf(name, r, times, byNode[name])
	if v := byNode[name]; v != nil {
		for i := range times {
			if !math.IsNaN(v.ok[i]) {
				c.Succeeded += int64(v.ok[i])
				c.Failed += int64(v.bad[i])
			}
		}
	}
	return c
}
