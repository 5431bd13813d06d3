package metrics_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/den-project/den/den/metrics"
)

// Queue names are whatever a writer put in a queue document: invalid
// UTF-8 (client_golang panics on it), megabytes, and any number of them.
// The per-queue series stay valid and bounded: a scrape never fails and
// never grows past QueueSeriesMax series a metric.
func TestPerQueueSeriesAreBoundedAndValid(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	todo := map[string]int64{"bad \xff\xfe utf-8": 1, strings.Repeat("x", 1<<20): 2}
	running := map[string]int{}
	for i := range 3 * metrics.QueueSeriesMax {
		name := fmt.Sprintf("q%05d", i)
		todo[name] = 0
		if i%7 == 0 {
			todo[name] = int64(i)
		}
		running[name] = i % 2
		m.Claims.WithLabelValues(m.Queue(name)).Inc()
	}
	m.Claims.WithLabelValues(m.Queue("bad \xff utf-8")).Inc()
	m.SetState(func() map[string]int { return running }, func() map[string]int64 { return todo }, nil)

	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var wantTodo int64
	for _, v := range todo {
		wantTodo += v
	}
	for _, f := range fams {
		switch f.GetName() {
		case "den_claims_total", "den_queue_count_todo", "den_tasks_running":
		default:
			continue
		}
		if n := len(f.GetMetric()); n > metrics.QueueSeriesMax+1 {
			t.Errorf("%s: %d series, want at most %d", f.GetName(), n, metrics.QueueSeriesMax+1)
		}
		var sum float64
		other := false
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !utf8.ValidString(l.GetValue()) || len(l.GetValue()) > 200 {
					t.Errorf("%s: label %q is not a short valid UTF-8 string", f.GetName(), l.GetValue()[:min(len(l.GetValue()), 40)])
				}
				other = other || l.GetValue() == metrics.OtherQueues
			}
			sum += value(s)
		}
		if !other {
			t.Errorf("%s: no %s series for the queues past the cap", f.GetName(), metrics.OtherQueues)
		}
		want := map[string]float64{"den_claims_total": float64(3*metrics.QueueSeriesMax + 1), "den_queue_count_todo": float64(wantTodo), "den_tasks_running": float64(3 * metrics.QueueSeriesMax / 2)}[f.GetName()]
		if sum != want {
			t.Errorf("%s: series sum to %v, want %v: nothing is lost past the cap", f.GetName(), sum, want)
		}
	}
	// Past the cap, a queue with tasks to do keeps its own series.
	found := false
	for _, f := range fams {
		if f.GetName() != "den_queue_count_todo" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == fmt.Sprintf("q%05d", 1400) {
				found = true
			}
		}
	}
	if !found {
		t.Error("den_queue_count_todo: queue q01400 (1400 tasks to do) has no series of its own")
	}
	// Disbatch's count_todo goes under its own name: it counts cancelled
	// and orphaned tasks too, so it is not "todo" nor "queued". The old
	// name stays beside it, said deprecated, with the same values.
	series := map[string]map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "den_queue_todo" && !strings.HasPrefix(f.GetHelp(), "Deprecated") {
			t.Errorf("den_queue_todo is served without saying it is deprecated: %q", f.GetHelp())
		}
		if f.GetName() == "den_queue_todo" || f.GetName() == "den_queue_count_todo" {
			series[f.GetName()] = map[string]float64{}
			for _, s := range f.GetMetric() {
				series[f.GetName()][s.GetLabel()[0].GetValue()] = value(s)
			}
		}
		if f.GetName() == "den_queue_count_todo" && !strings.Contains(f.GetHelp(), "cancelled") {
			t.Errorf("den_queue_count_todo's help does not say it counts cancelled tasks: %q", f.GetHelp())
		}
	}
	if len(series["den_queue_count_todo"]) == 0 || !maps.Equal(series["den_queue_todo"], series["den_queue_count_todo"]) {
		t.Errorf("den_queue_todo (deprecated) %d series, den_queue_count_todo %d: want the same series and values", len(series["den_queue_todo"]), len(series["den_queue_count_todo"]))
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}
