package web

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// chartRange is a range the charts can show: its name (the range
// parameter), how far back, the step of the stats it draws, and where
// its time axis has a tick (every Tick, labelled in TickFmt, UTC).
type chartRange struct {
	Name  string
	Title string // "last 15 minutes", ...
	Span  time.Duration
	Step  time.Duration
	Label string // "per minute", ...

	Tick    time.Duration
	TickFmt string
}

// chartRanges are the charts' ranges, shortest first. The steps are the
// stats' own (queue.StatsSteps): nodes write once a minute, so a minute
// is the finest there is, and 15 points of a minute draw a quarter of an
// hour well enough; a finer step would need nodes to write more often.
// Each range draws at most 168 points (a week of hours), so that a page
// reads at most that many documents per queue and node.
var chartRanges = []chartRange{
	{"15m", "last 15 minutes", 15 * time.Minute, time.Minute, "per minute", 5 * time.Minute, "15:04"},
	{"hour", "last hour", time.Hour, time.Minute, "per minute", 10 * time.Minute, "15:04"},
	{"6h", "last 6 hours", 6 * time.Hour, 15 * time.Minute, "per 15 minutes", time.Hour, "15:04"},
	{"day", "last day", 24 * time.Hour, 15 * time.Minute, "per 15 minutes", 3 * time.Hour, "15:04"},
	{"week", "last week", 7 * 24 * time.Hour, time.Hour, "per hour", 24 * time.Hour, "Mon 2"},
}

// defaultRange is the range shown when none is asked for.
const defaultRange = "hour"

// rangeOf is the range named name, else the default.
func rangeOf(name string) chartRange {
	for _, r := range chartRanges {
		if r.Name == name {
			return r
		}
	}
	return rangeOf(defaultRange)
}

// tick is a time the x axis marks: the index of its bucket and its label.
type tick struct {
	I     int
	Label string
}

// ticks are the buckets of times (r.buckets) that start at a multiple of
// r.Tick (UTC), with their labels.
func (r chartRange) ticks(times []time.Time) []tick {
	var out []tick
	for i, t := range times {
		if t.UTC().Truncate(r.Tick).Equal(t) {
			out = append(out, tick{i, t.UTC().Format(r.TickFmt)})
		}
	}
	return out
}

// buckets are the starts of the steps of r that end at now, oldest first.
func (r chartRange) buckets(now time.Time) []time.Time {
	n := int(r.Span / r.Step)
	last := now.UTC().Truncate(r.Step)
	out := make([]time.Time, n)
	for i := range out {
		out[i] = last.Add(-time.Duration(n-1-i) * r.Step)
	}
	return out
}

// series is one line of a chart: a value per bucket, NaN where there is
// none (drawn as a gap).
type series struct {
	Name   string
	Color  chartColor
	Values []float64
	Dashed bool
}

// chartColor is a line's colour by name. The SVG carries it twice: as the
// class c-NAME, which style.css colours from the page's scheme (light or
// dark: CSS wins over an SVG attribute), and as its light colour in the
// stroke and fill attributes, for an SVG read without the stylesheet.
type chartColor string

const (
	colorOK, colorBad      chartColor = "ok", "bad"
	colorTodo, colorRun    chartColor = "todo", "run"
	colorLoad, colorAccent chartColor = "load", "accent"
	colorP50, colorP95     chartColor = "run", "p95" // the quantiles' lines
)

// lightColors are the colours of style.css's light scheme (its :root
// variables --ok, --bad, ...).
var lightColors = map[chartColor]string{colorOK: "#1a7f37", colorBad: "#c62828", colorTodo: "#8a6d00",
	colorRun: "#0b63c5", colorLoad: "#667085", colorAccent: "#2f4f8f", colorP95: "#8a3ffc"}

// Hex is c's colour in the light scheme.
func (c chartColor) Hex() string { return lightColors[c] }

// Class is the CSS class that gives c's colour in the page's scheme.
func (c chartColor) Class() string { return "c-" + string(c) }

// chartView is one chart as the templates show it.
type chartView struct {
	Title  string
	Series []series
	SVG    template.HTML
}

// Chart geometry, in the SVG's own units (it scales to its box).
const (
	chartW, chartH = 360.0, 130.0
	plotL, plotR   = 34.0, 352.0
	plotT, plotB   = 8.0, 108.0
)

// newChart draws title's series over the buckets times of r as inline
// SVG: a line each, a y axis from 0 to the largest value, and r's ticks
// along the time axis (UTC). Each line carries its values in data-values ("-" for none), so
// that they can be read back (tests do).
func newChart(title string, r chartRange, times []time.Time, lines ...series) chartView {
	top := 0.0
	for _, s := range lines {
		for _, v := range s.Values {
			if !math.IsNaN(v) && v > top {
				top = v
			}
		}
	}
	top = niceCeil(top)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, template.HTMLEscapeString(title))
	// Grid: the base line, the middle and the top, with their values.
	for _, f := range []float64{0, 0.5, 1} {
		y := plotB - f*(plotB-plotT)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" class="grid" stroke="#e4e7ec" stroke-width="1"/>`, plotL, y, plotR, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" class="axis" text-anchor="end" font-size="10" fill="#667085">%s</text>`, plotL-4, y+3.5, axisNumber(f*top))
	}
	writeTicks(&b, r.ticks(times), len(times))
	for _, s := range lines {
		values := make([]string, len(s.Values))
		for i, v := range s.Values {
			values[i] = "-"
			if !math.IsNaN(v) {
				values[i] = strconv.FormatFloat(v, 'f', -1, 64)
			}
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<g class="series %s" data-series="%s" data-values="%s" stroke="%s" fill="none" stroke-width="1.6"%s>`,
			s.Color.Class(), template.HTMLEscapeString(s.Name), strings.Join(values, ","), s.Color.Hex(), dash)
		// One polyline per run of values without a gap; a lone value is a dot.
		var run []string
		flush := func() {
			switch {
			case len(run) == 1:
				xy := strings.Split(run[0], ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.4" fill="%s"/>`, xy[0], xy[1], s.Color.Hex())
			case len(run) > 1:
				fmt.Fprintf(&b, `<polyline points="%s"/>`, strings.Join(run, " "))
			}
			run = run[:0]
		}
		for i, v := range s.Values {
			if math.IsNaN(v) {
				flush()
				continue
			}
			x := xOf(i, len(s.Values))
			y := plotB
			if top > 0 {
				y = plotB - v/top*(plotB-plotT)
			}
			run = append(run, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		flush()
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return chartView{Title: title, Series: lines, SVG: template.HTML(b.String())}
}

// writeTicks draws the time axis: a faint line up the plot and a label
// centred under it at each tick (of n buckets), and "UTC" in the corner. A
// label that would run into the one before it or out of the chart is
// left out; its line stays.
func writeTicks(b *strings.Builder, ticks []tick, n int) {
	fmt.Fprintf(b, `<text x="2" y="%g" class="utc" font-size="8" fill="#98a2b3">UTC</text>`, chartH-6)
	lastEnd := utcEnd
	for _, tk := range ticks {
		x := xOf(tk.I, n)
		fmt.Fprintf(b, `<line class="tick" x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eef0f3" stroke-width="1"/>`, x, plotT, x, plotB+3)
		w := labelWidth * float64(len(tk.Label))
		anchor, from := "middle", x-w/2
		if from+w > chartW-2 { // at the right edge: ends at its tick
			anchor, from = "end", x-w
		}
		if from < lastEnd+4 && lastEnd == utcEnd && x >= lastEnd+4 { // the first, by "UTC": starts at its tick
			anchor, from = "start", x
		}
		if from < lastEnd+4 {
			continue
		}
		lastEnd = from + w
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%g" text-anchor="%s" font-size="10" fill="#667085">%s</text>`, x, chartH-6, anchor, template.HTMLEscapeString(tk.Label))
	}
}

// labelWidth is about how wide a character of a 10-unit label is, and
// utcEnd where "UTC" ends.
const labelWidth, utcEnd = 5.6, 18.0

// xOf is where bucket i of n is drawn.
func xOf(i, n int) float64 {
	return plotL + (plotR-plotL)*float64(i)/math.Max(float64(n-1), 1)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// axisNumber writes an axis value short: 0.5, 20, 1.5k.
func axisNumber(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// chartsData are the overview's charts over Range.
type chartsData struct {
	Range  chartRange
	Ranges []chartRange
	// Base is the page the range links go to ("/").
	Base   string
	Queues []queueCharts
	Nodes  []nodeCharts
	// QueuesLeftOut and NodesLeftOut are how many are not charted.
	QueuesLeftOut, NodesLeftOut int
}

// chartsShown is the most queues, and the most nodes, the overview charts:
// the page stays small with thousands of queues.
const chartsShown = 30

type queueCharts struct {
	Name              string
	Finished, Backlog chartView
}

type nodeCharts struct {
	Name              string
	Finished, Running chartView
}

// overviewCharts draws the charts of the queues and nodes in points
// (stats documents of r's step, from r's start on).
func overviewCharts(r chartRange, now time.Time, queues []queue.Queue, points []queue.StatPoint) chartsData {
	times := r.buckets(now)
	byQueue, byNode := foldStats(times, points)
	d := chartsData{Range: r, Ranges: chartRanges, Base: "/"}
	queues, d.QueuesLeftOut = busiestQueues(queues, byQueue, chartsShown)
	for _, q := range queues {
		v := byQueue[q.ID]
		if v == nil {
			v = newQueueSeries(len(times))
		}
		v.openStep(r)
		name := queue.ShownName(q.Name)
		d.Queues = append(d.Queues, queueCharts{Name: name,
			Finished: newChart(name+": finished "+r.Label, r, times,
				series{Name: "succeeded", Color: colorOK, Values: v.ok}, series{Name: "failed", Color: colorBad, Values: v.bad}),
			Backlog: newChart(name+": backlog", r, times,
				// count_todo under its own name: Disbatch's bookkeeping
				// counts cancelled and orphaned tasks too, never "queued".
				series{Name: "count_todo", Color: colorTodo, Values: v.todo}, series{Name: "running", Color: colorRun, Values: v.run}),
		})
	}
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > chartsShown {
		d.NodesLeftOut = len(names) - chartsShown
		names = names[:chartsShown]
	}
	for _, name := range names {
		d.Nodes = append(d.Nodes, nodeChartsOf(name, r, times, byNode[name]))
	}
	return d
}

// nodeChartsOf draws a node's charts: the tasks it finished in each step,
// as it counted them, and the tasks it held with its host's load, as it
// sampled them.
func nodeChartsOf(name string, r chartRange, times []time.Time, v *nodeSeries) nodeCharts {
	if v == nil {
		v = newNodeSeries(len(times))
	}
	v.openStep(r)
	return nodeCharts{Name: name,
		Finished: newChart(name+": finished "+r.Label, r, times,
			series{Name: "succeeded", Color: colorOK, Values: v.ok}, series{Name: "failed", Color: colorBad, Values: v.bad}),
		Running: newChart(name+": tasks running and load", r, times,
			series{Name: "tasks running", Color: colorRun, Values: v.run}, series{Name: "load (1 min)", Color: colorLoad, Values: v.load}),
	}
}

// queueSeries are one queue's values per step: finished (ok, bad),
// backlog (todo, run), and its runs counted by how long they ran and
// waited (runs, waits).
type queueSeries struct {
	ok, bad, todo, run []float64
	runs, waits        []queue.Durations
}

// openStep leaves the step under way blank in what finished when r's
// step is a minute and nothing is written in it yet: nodes write a
// minute's completions once it is over, so it would read 0 (a drop that
// is not one) until then. What is written in it shows (a node that
// stopped wrote its last completions there). A longer step's count so
// far is drawn: it grows as nodes write it.
func (v *queueSeries) openStep(r chartRange) { blankLast(r, v.ok, v.bad) }

// blankLast leaves the last value of ok and bad blank when r's step is a
// minute and both are 0.
func blankLast(r chartRange, ok, bad []float64) {
	n := len(ok) - 1
	if r.Step <= time.Minute && n >= 0 && ok[n] == 0 && bad[n] == 0 {
		ok[n], bad[n] = math.NaN(), math.NaN()
	}
}

// nodeSeries are one node's values per step: finished (ok, bad), as it
// counted them, and its samples (run, load).
type nodeSeries struct{ ok, bad, run, load []float64 }

func (v *nodeSeries) openStep(r chartRange) { blankLast(r, v.ok, v.bad) }

// A step with no document has nothing finished and no backlog (nodes
// write a queue's backlog while it has one, and once more when it is
// gone), except the step under way, not written yet: a gap. A node's
// samples are missing there (it did not run): a gap.
func newQueueSeries(n int) *queueSeries {
	backlog := func() []float64 {
		v := make([]float64, n)
		v[n-1] = math.NaN()
		return v
	}
	return &queueSeries{ok: make([]float64, n), bad: make([]float64, n), todo: backlog(), run: backlog(),
		runs: make([]queue.Durations, n), waits: make([]queue.Durations, n)}
}

func newNodeSeries(n int) *nodeSeries {
	gaps := func() []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = math.NaN()
		}
		return v
	}
	return &nodeSeries{make([]float64, n), make([]float64, n), gaps(), gaps()}
}

// foldStats puts each stats point in its queue's or node's series, at its
// step; a point outside times is left out.
func foldStats(times []time.Time, points []queue.StatPoint) (map[bson.ObjectID]*queueSeries, map[string]*nodeSeries) {
	index := make(map[time.Time]int, len(times))
	for i, t := range times {
		index[t] = i
	}
	byQueue := map[bson.ObjectID]*queueSeries{}
	byNode := map[string]*nodeSeries{}
	for _, p := range points {
		i, ok := index[p.T.UTC()]
		if !ok {
			continue
		}
		switch p.Kind {
		case queue.StatQueue:
			v := byQueue[p.Queue]
			if v == nil {
				v = newQueueSeries(len(times))
				byQueue[p.Queue] = v
			}
			v.ok[i], v.bad[i] = float64(p.Succeeded), float64(p.Failed)
			v.runs[i], v.waits[i] = p.RunTimes(), p.WaitTimes()
			if p.Sampled {
				v.todo[i], v.run[i] = float64(p.Queued), float64(p.Running)
			}
		case queue.StatNode:
			v := byNode[p.Node]
			if v == nil {
				v = newNodeSeries(len(times))
				byNode[p.Node] = v
			}
			v.ok[i], v.bad[i] = float64(p.Succeeded), float64(p.Failed)
			if p.NodeSampled() {
				v.run[i], v.load[i] = float64(p.Running), p.Load
			}
		}
	}
	return byQueue, byNode
}

// activity is how many tasks a queue finished and had queued over the
// range (a gap counts nothing).
func (v *queueSeries) activity() float64 {
	if v == nil {
		return 0
	}
	n := 0.0
	for _, vs := range [][]float64{v.ok, v.bad, v.todo} {
		for _, x := range vs {
			if !math.IsNaN(x) {
				n += x
			}
		}
	}
	return n
}

// busiestQueues are the busiest queues (most tasks finished and queued
// over the range) first, by name among equals, at most shown of them, and
// how many were left out. queues is not changed.
func busiestQueues(queues []queue.Queue, byQueue map[bson.ObjectID]*queueSeries, shown int) ([]queue.Queue, int) {
	queues = slices.Clone(queues)
	sort.SliceStable(queues, func(i, j int) bool {
		ai, aj := byQueue[queues[i].ID].activity(), byQueue[queues[j].ID].activity()
		if ai != aj {
			return ai > aj
		}
		return queues[i].Name < queues[j].Name
	})
	if len(queues) > shown {
		return queues[:shown], len(queues) - shown
	}
	return queues, 0
}

// runTimeRange is what the task page compares a task's run time with:
// its queue's mean run time per hour over the last week.
var runTimeRange = rangeOf("week")

// runTimeChart draws the mean run time of the queue's runs per hour
// (points: its stats of runTimeRange's step) against took, the run times
// of this task (one dashed line each, the last run first).
func runTimeChart(now time.Time, points []queue.StatPoint, took []time.Duration) chartView {
	times := runTimeRange.buckets(now)
	index := make(map[time.Time]int, len(times))
	mean := make([]float64, len(times))
	for i, t := range times {
		index[t] = i
		mean[i] = math.NaN()
	}
	for _, p := range points {
		if i, ok := index[p.T.UTC()]; ok && p.Runs > 0 {
			mean[i] = math.Round(p.RunSeconds/float64(p.Runs)*1000) / 1000
		}
	}
	lines := []series{{Name: "queue mean run (s)", Color: colorAccent, Values: mean}}
	for i, d := range took {
		flat := make([]float64, len(times))
		for j := range flat {
			flat[j] = math.Round(d.Seconds()*1000) / 1000
		}
		name := "this task (s)"
		if i > 0 {
			name = fmt.Sprintf("this task, run %d (s)", len(took)-i)
		}
		lines = append(lines, series{Name: name, Color: colorBad, Values: flat, Dashed: true})
	}
	return newChart("Run time: this task and its queue mean, per hour", runTimeRange, times, lines...)
}

// tookText says how long a run took, as people read it: "0.42 s", "12.3 s",
// "4 min 05 s", "2 h 03 min".
func tookText(d time.Duration) string {
	switch s := d.Seconds(); {
	case s < 10:
		return strconv.FormatFloat(math.Round(s*100)/100, 'f', -1, 64) + " s"
	case s < 60:
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + " s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
	}
}
