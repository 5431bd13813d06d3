package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/web"
	"github.com/den-project/den/den/web/dci"
)

// dciServer is Disbatch's web API as den web serves it on an address of
// its own (--dci-listen, web.dci_listen; see docs/web.md).
type dciServer struct {
	ln net.Listener
	h  http.Handler
}

// newDCIServer listens on addr and builds the API's handler, with the
// page's token, host names and limiter on wrong tokens.
func newDCIServer(d *database, addr string, limiter *web.Limiter, log *zap.Logger) (*dciServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("den web: listen on %s for the Disbatch web API: %w", addr, err)
	}
	guard, err := web.NewGuard(web.GuardOptions{Token: d.cfg.WebToken, Listen: addr, Addr: ln.Addr(), Hosts: d.cfg.WebHosts, Log: log, Limiter: limiter})
	if err != nil {
		ln.Close()
		return nil, err
	}
	h, err := dci.New(dci.Options{DB: d.db, Guard: guard, Log: log, Plugins: d.cfg.WebDCIPlugins, DeadNodeAfter: d.cfg.DeadNodeAfter,
		CountsAge: webCountsAge(d.cfg.WebCountsAge)})
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &dciServer{ln: ln, h: h}, nil
}

// serve serves the API until ctx ends, then shuts it down gracefully.
func (s *dciServer) serve(ctx context.Context, writes bool, log *zap.Logger) error {
	mode := "read-only: writes are refused (no web.token)"
	if writes {
		mode = "writes for whoever gives web.token (basic-auth password or Bearer)"
	}
	say := log.Info
	if !loopback(s.ln.Addr()) {
		say = log.Warn
	}
	say("den web serving the Disbatch web API", zap.String("url", "http://"+s.ln.Addr().String()+"/"), zap.String("mode", mode))
	srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, WriteTimeout: 10 * time.Minute,
		IdleTimeout: 2 * time.Minute, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("den web: Disbatch web API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("den web: shut down the Disbatch web API: %w", err)
	}
	return nil
}
