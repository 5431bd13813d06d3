package devdb

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the development database, for den dev's /metrics: what its
// clients (the node, its runners, mongosh) asked and how long the server
// took, so that a slow den dev shows which command is slow.
var (
	commandsDesc = prometheus.NewDesc("den_devdb_commands_total",
		"Commands the development database ran, by command and collection (handshakes left out).",
		[]string{"command", "collection"}, nil)
	secondsDesc = prometheus.NewDesc("den_devdb_command_seconds_total",
		"Time the development database spent on commands (writes one at a time per database, reads beside them), by command and collection.",
		[]string{"command", "collection"}, nil)
)

// Collector returns a collector of the server's command counts and times.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- commandsDesc
	ch <- secondsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for key, n := range st.Calls {
		cmd, coll, _ := strings.Cut(key, " ")
		ch <- prometheus.MustNewConstMetric(commandsDesc, prometheus.CounterValue, float64(n), cmd, coll)
		ch <- prometheus.MustNewConstMetric(secondsDesc, prometheus.CounterValue, st.Busy[key].Seconds(), cmd, coll)
	}
}
