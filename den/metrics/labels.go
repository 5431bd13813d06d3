package metrics

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// QueueSeriesMax is the most queues a per-queue metric has a series of;
// the queues past it are counted together under the queue label
// OtherQueues. A database may hold any number of queues (anyone with
// insert rights on queues can add 80,000): a scrape stays a few hundred
// kilobytes whatever their number.
//
// For the counters (den_claims_total, den_task_completions_total,
// den_task_retries_total, den_task_output_bytes_total) the first
// QueueSeriesMax queue names the node counts anything for keep their
// series for the life of the process. For the gauges read at each scrape
// (den_queue_count_todo, den_tasks_running) the queues with a non-zero value come
// first, then the rest by name.
const QueueSeriesMax = 500

// OtherQueues is the queue label of what is counted for the queues past
// QueueSeriesMax.
const OtherQueues = "_other"

// labelMax is the longest label value, in bytes: a queue name is whatever
// a writer put there, up to megabytes.
const labelMax = 200

// Label makes a queue name a label value Prometheus takes: valid UTF-8
// (an invalid byte becomes U+FFFD; client_golang panics on invalid UTF-8),
// at most labelMax bytes (cut at a rune boundary, with "…" at the end).
func Label(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if len(name) <= labelMax {
		return name
	}
	cut := labelMax - len("…")
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

// queueLabels hands out the queue labels of the counters: the first
// QueueSeriesMax distinct names, then OtherQueues.
type queueLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *queueLabels) label(name string) string {
	name = Label(name)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[name] {
		return name
	}
	if len(l.seen) >= QueueSeriesMax {
		return OtherQueues
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[name] = true
	return name
}

// Queue is the queue label for queue name in the per-queue counters: the
// name made a valid label (Label), or OtherQueues past QueueSeriesMax
// names.
func (m *Metrics) Queue(name string) string { return m.queues.label(name) }

type series struct {
	label string
	value int64
}

// capSeries makes the series of a per-queue gauge from its values by
// queue name: at most QueueSeriesMax of them, those with a non-zero value
// first, then by name; the rest summed under OtherQueues. Names that are
// the same once made labels are summed.
func capSeries(by map[string]int64) []series {
	merged := make(map[string]int64, len(by))
	for name, v := range by {
		merged[Label(name)] += v
	}
	out := make([]series, 0, len(merged))
	for label, v := range merged {
		out = append(out, series{label, v})
	}
	if len(out) <= QueueSeriesMax {
		return out
	}
	slices.SortFunc(out, func(a, b series) int {
		if za, zb := a.value == 0, b.value == 0; za != zb {
			if za {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.label, b.label)
	})
	var rest int64
	for _, s := range out[QueueSeriesMax:] {
		rest += s.value
	}
	out = append(out[:QueueSeriesMax], series{OtherQueues, rest})
	return out
}
