package web

import (
	"context"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Guessing the token. Every token a request presents (on /login, in an
// Authorization: Bearer header or in a token form field) is compared, and
// the right one is accepted at once, from any address, at any time: an
// address is never locked out, because the operator may share it with
// the guesser (everyone who comes through an SSH tunnel is 127.0.0.1).
//
// So nothing here bounds how many guesses get an answer: a guesser that
// does not wait for the answers to its wrong tokens learns from the
// missing 303 as fast as the server answers. What bounds guessing is the
// token itself: den/config refuses a web.token it estimates below 80 bits
// (config.MinWebTokenBits; docs/security.md gives the arithmetic). What
// the limiter does is slow a guesser that waits for its answers and keep
// the log short: after LoginFailures wrong tokens within LoginWindow, an
// address is limited for LoginLimit. While it is, each further wrong
// token is answered with 429 and Retry-After (the seconds left), after
// LoginSlowdown; at most slowedPerAddress such answers per address, and
// slowedMax in all, wait at once (beyond, the answer is at once), so that
// the slowing cannot pin the server's memory. Those answers are not
// logged: one warning when the limit starts, one line when it ends
// (noticed at the address's next token). A session cookie is not a guess
// and is never slowed.
//
// The client address is the connection's remote IP, never a header
// (X-Forwarded-For can be written by whoever sends the request); an IPv6
// client counts by its /64, which one machine usually has whole. Behind a
// reverse proxy every client has the proxy's address and shares its
// limit: the proxy should limit by client itself.
const (
	LoginFailures = 10
	LoginWindow   = 15 * time.Minute
	LoginLimit    = 15 * time.Minute
	LoginSlowdown = 2 * time.Second
	// slowedPerAddress and slowedMax bound the answers waiting out
	// LoginSlowdown, per address and in all.
	slowedPerAddress = 4
	slowedMax        = 256
	// maxLimited bounds the addresses remembered; when full, addresses
	// that are not limited (the longest quiet first) are forgotten, or
	// else the limits that end first.
	maxLimited = 10000
)

// attempts is what the limiter remembers of one address.
type attempts struct {
	start  time.Time // the window's start
	last   time.Time // the last failure
	n      int       // failures in the window
	until  time.Time // limited until, or zero
	slowed int       // wrong tokens answered while limited
	held   int       // answers waiting out LoginSlowdown now
}

// limiter counts wrong tokens per client address. It logs one warning
// when an address is limited and one line when the limit has ended,
// never one line per wrong token.
type limiter struct {
	mu   sync.Mutex
	m    map[string]*attempts
	held int // answers waiting out LoginSlowdown, all addresses
	log  *zap.Logger
}

func newLimiter(log *zap.Logger) *limiter {
	return &limiter{m: map[string]*attempts{}, log: log}
}

// clientKey is the address a request counts against: the remote IP, or
// its /64 for IPv6.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// expire forgets key's limit if it has ended by now, and logs that it
// has: called for every token key presents, right or wrong.
func (l *limiter) expire(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.m[key]
	if a == nil || a.until.IsZero() || now.Before(a.until) {
		return
	}
	l.log.Info("web: an address limited for wrong tokens is no longer limited", zap.String("address", key),
		zap.Int("wrong_tokens_while_limited", a.slowed))
	delete(l.m, key)
}

// failed records a wrong token from key at now. It reports whether the
// address was limited already (the answer is then 429, slowed) and for
// how much longer; the wrong token that starts the limit is answered as
// any wrong one.
func (l *limiter) failed(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.m[key]
	if a == nil {
		if len(l.m) >= maxLimited {
			l.evict()
		}
		a = &attempts{start: now}
		l.m[key] = a
	}
	if !a.until.IsZero() {
		if left := a.until.Sub(now); left > 0 {
			a.slowed++
			return left, true
		}
	}
	if now.Sub(a.start) >= LoginWindow {
		held := a.held
		*a = attempts{start: now, held: held}
	}
	a.n++
	a.last = now
	if a.n >= LoginFailures && a.until.IsZero() {
		a.until = now.Add(LoginLimit)
		l.log.Warn("web: too many wrong tokens from one address; its wrong tokens are answered slowly (429) for a while, the right token still works",
			zap.String("address", key), zap.Int("failures", a.n), zap.Duration("window", LoginWindow),
			zap.Duration("limited_for", LoginLimit), zap.Duration("slowdown", LoginSlowdown))
	}
	return 0, false
}

// hold takes one of the places for an answer that waits out
// LoginSlowdown, if key and the server have one free; release gives it
// back.
func (l *limiter) hold(key string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.m[key]
	if a == nil || a.held >= slowedPerAddress || l.held >= slowedMax {
		return nil, false
	}
	a.held++
	l.held++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		a.held-- // a, even if forgotten by now: the count is its own
		l.held--
	}, true
}

// evict forgets addresses to make room, a tenth of maxLimited at a time
// (so that a flood of new addresses costs a sort now and then, not a scan
// per request): first those not limited, the longest quiet first, then
// the limits that end first.
func (l *limiter) evict() {
	keys := make([]string, 0, len(l.m))
	for k := range l.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := l.m[keys[i]], l.m[keys[j]]
		if a.until.IsZero() != b.until.IsZero() {
			return a.until.IsZero()
		}
		if a.until.IsZero() {
			return a.last.Before(b.last)
		}
		return a.until.Before(b.until)
	})
	for _, k := range keys[:len(keys)-maxLimited*9/10] {
		delete(l.m, k)
	}
}

// sleep waits d, or until ctx ends (the client went away).
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
