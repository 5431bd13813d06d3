// Package httpserve is a node's HTTP endpoint: /metrics (Prometheus text
// format, from the registry it is given), /healthz (200 while the process
// serves) and /readyz (200 when the node says it is ready, else 503 with a
// one-line reason). Other handlers (a status page) can be mounted under a
// path prefix with Mount. The endpoint's own paths answer any Host
// header: they show nothing of tasks, and scrapers and probes reach a node
// by names it cannot know; a mounted page checks the names it answers
// itself (den/web answers only its own, 421 otherwise).
//
// It is off unless the configuration sets http.listen; it binds only the
// address given (127.0.0.1:9187 in the examples: loopback unless the
// operator says otherwise) and stops with the context it runs under.
package httpserve
