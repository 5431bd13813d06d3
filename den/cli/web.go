package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/web"
)

func newWebCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Serve the web status page: queues, nodes, tasks and their output",
		Long: `Serve the status page (see docs/web.md): queues with
todo/running/done/failed and what finished in the last 15 minutes, nodes
with heartbeat age, running tasks, maxthreads and resources, a filtered
task list, and each task's document, history and output (polled while it
runs), all read from the database. Connects as the other operator commands
do (--config, DEN_MONGO_URI, --mongo-uri, --database).

It listens on web.listen (default 127.0.0.1:8080: this machine only);
--listen overrides it. Reading needs nothing, so give another address
only on a network you trust, or behind a proxy that authenticates. It
answers only its own host names (the listen address, localhost, the
hostname when listening beyond loopback, and web.hosts, for a proxy's
name); any other Host gets 421.

Actions (cancel a task, retry an ended task, set a node's maxthreads)
exist only when web.token is configured (in the file, or DEN_WEB_TOKEN;
made by a random generator, such as openssl rand -hex 32: a token den
can tell is weak is refused at start): log in on the page with it (a
session ends on logout, after 2 hours unused, 12 hours after login, or
when den web stops), or send it as Authorization: Bearer TOKEN. The right
token is always accepted; after 10 wrong tokens in 15 minutes, an
address's wrong tokens are answered slowly, with 429, for 15 minutes.
Without it the page is read-only.

With --dci-listen ADDR (web.dci_listen) it also serves Disbatch's web
API, the Perl DCI's routes (GET /queues, POST /tasks/:queue, ...), at the
root of ADDR: Disbatch's disbatch command and scripts written for the Perl
DCI work with --url http://ADDR. Reads need nothing; writes need web.token
as the basic-auth password (disbatch --username any --password TOKEN) or a
Bearer token, and get 401 without it.

Started while MongoDB is unreachable, or when it becomes so, den web
keeps serving: every page shows "database unreachable since …, retrying"
with status 503, and it pings the database every 2 s until it answers.`,
		Example: `  den web --config /etc/disbatch/config.json
  DEN_WEB_TOKEN=$(openssl rand -hex 32) den web --mongo-uri mongodb://db1/ --listen 127.0.0.1:9000`,
		Args: cobra.NoArgs,
		// Started while MongoDB is down, it serves pages that say so
		// (503) and retries in the background, as den run does.
		RunE: withDBPing(false, func(cmd *cobra.Command, _ []string, d *database) error {
			listen := d.cfg.WebListen
			if cmd.Flags().Changed("listen") {
				listen, _ = cmd.Flags().GetString("listen")
				if _, _, err := net.SplitHostPort(listen); err != nil {
					return usagef("--listen %q: want host:port, such as 127.0.0.1:8080", listen)
				}
			}
			log, _, err := newLogger(d.cfg.LogLevel, d.cfg.LogFormat)
			if err != nil {
				return err
			}
			defer log.Sync()
			for _, w := range d.cfg.Warnings {
				log.Warn(w)
			}
			dciListen := d.cfg.WebDCIListen
			if cmd.Flags().Changed("dci-listen") {
				dciListen, _ = cmd.Flags().GetString("dci-listen")
				if _, _, err := net.SplitHostPort(dciListen); dciListen != "" && err != nil {
					return usagef("--dci-listen %q: want host:port, such as 127.0.0.1:8081", dciListen)
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("den web: listen on %s: %w", listen, err)
			}
			// One count of wrong tokens per address for the page and the
			// Disbatch web API: spreading guesses over both gains nothing.
			limiter := web.NewLimiter(log)
			// The page answers only the names of this address, localhost
			// and web.hosts (421 to any other Host: DNS rebinding).
			h, err := web.New(web.Options{DB: d.db, Log: log, Token: d.cfg.WebToken, DeadNodeAfter: d.cfg.DeadNodeAfter,
				Listen: listen, Addr: ln.Addr(), Hosts: d.cfg.WebHosts, Watch: cmd.Context(), Limiter: limiter, CountsAge: webCountsAge(d.cfg.WebCountsAge)})
			if err != nil {
				ln.Close()
				return err
			}
			if dciListen == "" {
				return serveWeb(cmd.Context(), h, ln, d.cfg.WebToken != "", d.cfg.Database, log)
			}
			api, err := newDCIServer(d, dciListen, limiter, log)
			if err != nil {
				ln.Close()
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			apiDone := make(chan error, 1)
			go func() {
				err := api.serve(ctx, d.cfg.WebToken != "", log)
				cancel() // the API failing stops the page too
				apiDone <- err
			}()
			err = serveWeb(ctx, h, ln, d.cfg.WebToken != "", d.cfg.Database, log)
			cancel()
			if apiErr := <-apiDone; err == nil {
				err = apiErr
			}
			return err
		}),
	}
	addDBFlags(cmd.Flags())
	cmd.Flags().String("listen", config.DefaultWebListen, "address to serve on (config web.listen); anything but loopback makes the page reachable from the network")
	cmd.Flags().String("dci-listen", "", "address to serve Disbatch's web API on, as the Perl DCI answered it (config web.dci_listen; default: not served); see docs/web.md")
	return cmd
}

// serveWeb serves h on ln until ctx ends, then shuts down gracefully.
// It says on start where it listens, whether that is this machine only,
// and whether actions are enabled.
func serveWeb(ctx context.Context, h http.Handler, ln net.Listener, actions bool, database string, log *zap.Logger) error {
	reach := "this machine only"
	if !loopback(ln.Addr()) {
		reach = "reachable from the network: anyone who can connect can read task output"
	}
	mode := "read-only (no web.token)"
	if actions {
		mode = "actions enabled for whoever gives web.token"
	}
	say := log.Info
	if !loopback(ln.Addr()) {
		say = log.Warn
	}
	say("den web serving", zap.String("url", "http://"+ln.Addr().String()+"/"), zap.String("database", database),
		zap.String("reach", reach), zap.String("mode", mode))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("den web: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	log.Info("den web stopped")
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("den web: shut down: %w", err)
	}
	return nil
}

// loopback reports whether addr is a loopback address.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// webCountsAge is web.counts_age as den web's Options take it: 0 there
// is the default, and every view counting is negative.
func webCountsAge(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
