package web

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/mongoclient"
)

// While the database is unreachable (no server to send a read to, a
// network error, a timeout), every page shows a banner, "database
// unreachable since …, retrying", with status 503 and Retry-After; the
// driver's error goes to the log, never to the page. The outage starts
// when a read fails that way or the watch's ping does, and ends when a
// read or a ping succeeds.
const (
	// ProbeEvery is how often the watch (Options.Watch) pings the
	// database.
	ProbeEvery = 2 * time.Second
	// outageWait bounds a request's reads while the database is known to
	// be unreachable, so that pages answer at once instead of after the
	// driver's server selection timeout.
	outageWait = 2 * time.Second
)

// unreachable reports whether err says the database could not be
// reached (or had no primary), rather than that it refused what was asked.
func unreachable(err error) bool { return mongoclient.Unreachable(err) }

// markDown records that the database is unreachable: logged once, when
// the outage starts.
func (h *handler) markDown(err error) {
	if h.downSince.CompareAndSwap(0, h.now().UnixNano()) {
		h.dbFailing.Store(true)
		h.log.Warn("web: database unreachable; pages show a banner and answer 503 while den web retries", zap.Error(err))
	}
}

// outageText is the banner while the database is unreachable, or empty.
func (h *handler) outageText() string {
	ns := h.downSince.Load()
	if ns == 0 {
		return ""
	}
	return "Database unreachable since " + time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05 UTC") + ", retrying."
}

// watch pings the database every ProbeEvery until ctx ends, so that an
// outage is shown, and its end noticed, without a page failing first.
func (h *handler) watch(ctx context.Context) {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, outageWait)
		err := h.db.Client().Ping(pctx, nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			h.dbOK()
		case unreachable(err):
			h.markDown(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
