package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Mount is a handler served under a path prefix (such as "/status/"). The
// handler sees the full request path.
type Mount struct {
	Prefix  string
	Handler http.Handler
}

// Config is what a Server serves.
type Config struct {
	// Gatherer is what /metrics serves; nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// Ready says whether the node is ready: nil for /readyz 200, else 503
	// with the error's text. Nil Ready means always ready.
	Ready func() error
	// ReadyNote, when set, is what a ready node says of itself besides
	// "ready" (empty: nothing): /readyz then answers "ready: <note>".
	ReadyNote func() string
	// Mounts are extra handlers, each under its prefix. A prefix may not
	// be one of the server's own paths.
	Mounts []Mount
	// Log gets one line when serving starts and when it fails; nil logs
	// nothing.
	Log *zap.Logger
}

// shutdownGrace is how long a stopping server lets requests in flight
// finish.
const shutdownGrace = 5 * time.Second

// Handler returns the endpoint's handler: /metrics, /healthz, /readyz and
// the mounts.
func Handler(cfg Config) (http.Handler, error) {
	mux := http.NewServeMux()
	own := map[string]bool{"/healthz": true, "/readyz": true}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, oneLine(err.Error()))
				return
			}
		}
		if cfg.ReadyNote != nil {
			if note := cfg.ReadyNote(); note != "" {
				fmt.Fprintln(w, "ready: "+oneLine(note))
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	if cfg.Gatherer != nil {
		own["/metrics"] = true
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	}
	for _, m := range cfg.Mounts {
		p := m.Prefix
		if !strings.HasPrefix(p, "/") || m.Handler == nil {
			return nil, fmt.Errorf("http mount %q: a prefix starting with / and a handler are needed", p)
		}
		if own[strings.TrimSuffix(p, "/")] {
			return nil, fmt.Errorf("http mount %q: the endpoint serves that path itself", p)
		}
		mux.Handle(p, m.Handler)
		if !strings.HasSuffix(p, "/") {
			mux.Handle(p+"/", m.Handler)
		}
	}
	return mux, nil
}

// Serve serves cfg on ln until ctx is done, then shuts down, letting
// requests in flight finish for a few seconds. It closes ln.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	h, err := Handler(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          zap.NewStdLog(log),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("HTTP endpoint serving /metrics, /healthz, /readyz", zap.String("address", ln.Addr().String()))
	select {
	case err := <-done:
		return fmt.Errorf("HTTP endpoint on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("HTTP endpoint did not shut down cleanly", zap.Error(err))
	}
	srv.Close()
	<-done
	return nil
}

// oneLine keeps the first line of s.
func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}
