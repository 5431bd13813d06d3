package web

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// Guard makes the page's checks for another handler of the same process:
// den web's Disbatch web API (den/web/dci), served on an address of its
// own. It answers only the names of its own address, localhost and
// web.hosts (421 otherwise, hosts.go), and judges the tokens requests
// present against web.token, with the wrong tokens counted per client
// address in the Limiter the page has too (limit.go), so that a guesser
// gains nothing by spreading its guesses over both.
type Guard struct {
	hosts *hostNames
	limit *limiter
	token string
	log   *zap.Logger
	now   func() time.Time
	sleep func(context.Context, time.Duration)
}

// Limiter counts wrong tokens per client address (limit.go); one can be
// shared by the page (Options.Limiter) and a Guard.
type Limiter struct{ l *limiter }

// NewLimiter returns a Limiter that logs to log (nil: nowhere).
func NewLimiter(log *zap.Logger) *Limiter {
	if log == nil {
		log = zap.NewNop()
	}
	return &Limiter{l: newLimiter(log)}
}

// GuardOptions are what a Guard is built from; the fields mean what
// Options' fields of the same names do. A nil Limiter is a Guard's own.
type GuardOptions struct {
	Token   string
	Listen  string
	Addr    net.Addr
	Hosts   []string
	Log     *zap.Logger
	Now     func() time.Time
	Sleep   func(ctx context.Context, d time.Duration)
	Limiter *Limiter
}

// NewGuard returns a Guard; it fails on a web.hosts entry that is no
// host name.
func NewGuard(o GuardOptions) (*Guard, error) {
	g := &Guard{token: o.Token, log: o.Log, now: o.Now, sleep: o.Sleep}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.sleep == nil {
		g.sleep = sleep
	}
	if o.Limiter == nil {
		o.Limiter = NewLimiter(g.log)
	}
	g.limit = o.Limiter.l
	var err error
	if g.hosts, err = hostsFor(o.Listen, o.Addr, o.Hosts); err != nil {
		return nil, err
	}
	return g, nil
}

// HasToken reports whether a token is configured: without one nothing
// may write.
func (g *Guard) HasToken() bool { return g.token != "" }

// Host reports whether the request is for one of the guard's names; if
// not, it has answered 421 and a one-line note, logging the first names
// it refused once each.
func (g *Guard) Host(w http.ResponseWriter, r *http.Request) bool {
	if g.hosts.allows(r) {
		return true
	}
	(&handler{hosts: g.hosts, log: g.log}).misdirected(w, r)
	return false
}

// TokenCheck is what judging a presented token gave: OK, or wrong; and,
// when wrong from an address limited for guessing, Limited with the time
// until its limit ends (the answer is then 429 with Retry-After, and has
// already been slowed).
type TokenCheck struct {
	OK      bool
	Limited bool
	Retry   time.Duration
}

// RetryAfter is Retry for a Retry-After header: whole seconds, rounded up.
func (c TokenCheck) RetryAfter() int { return retrySeconds(c.Retry) }

// Check judges a token the request presents, as the page's login does:
// the right one is accepted at once from any address; a wrong one counts
// against the client's address, and from a limited one is answered
// slowly.
func (g *Guard) Check(r *http.Request, got string) TokenCheck {
	res, retry := g.limit.check(r.Context(), clientKey(r), got, g.token, g.now(), g.sleep)
	return TokenCheck{OK: res == tokenOK, Limited: res == tokenLimited, Retry: retry}
}

// CrossSite reports whether a browser says the request comes from a page
// of another site (Origin, Sec-Fetch-Site): such a request must not
// write, whatever credentials the browser attached to it.
func CrossSite(r *http.Request) bool { return crossSite(r) }

// check compares a presented token with the configured one (want, never
// empty), always: the right one is accepted at once, even from an address
// limited for guessing. A wrong one counts against key; from a limited
// address it is answered after LoginSlowdown (at most slowedPerAddress
// and slowedMax at once), with the time its limit has left.
func (l *limiter) check(ctx context.Context, key, got, want string, now time.Time, wait func(context.Context, time.Duration)) (tokenResult, time.Duration) {
	l.expire(key, now)
	if same(got, want) {
		return tokenOK, 0
	}
	left, limited := l.failed(key, now)
	if !limited {
		return tokenWrong, 0
	}
	if release, ok := l.hold(key); ok {
		wait(ctx, LoginSlowdown)
		release()
		if left -= LoginSlowdown; left < time.Second {
			left = time.Second
		}
	}
	return tokenLimited, left
}
