package web

import (
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Guessing the token is limited per client address: after LoginFailures
// wrong tokens within LoginWindow (on /login, in an Authorization: Bearer
// header or in a token form field), every token the address presents is
// refused without being compared, with 429 and Retry-After, for
// LoginBlock. A session cookie is not a guess and is never refused here,
// so an operator who is logged in keeps working.
//
// The client address is the connection's remote IP, never a header
// (X-Forwarded-For can be written by whoever sends the request); an IPv6
// client counts by its /64, which one machine usually has whole. Behind a
// reverse proxy every client has the proxy's address and shares its
// limit: the proxy should limit by client itself.
const (
	LoginFailures = 10
	LoginWindow   = 15 * time.Minute
	LoginBlock    = 15 * time.Minute
	// maxLimited bounds the addresses remembered; when full, addresses
	// that are not blocked (the longest quiet first) are forgotten, or
	// else the blocks that end first.
	maxLimited = 10000
)

// attempts is what the limiter remembers of one address.
type attempts struct {
	start   time.Time // the window's start
	last    time.Time // the last failure
	n       int       // failures in the window
	until   time.Time // blocked until, or zero
	refused int       // attempts refused while blocked
}

// limiter counts wrong tokens per client address. It logs one warning
// when an address is blocked and one line when it may try again (noticed
// at its next attempt), never one line per refused attempt.
type limiter struct {
	mu  sync.Mutex
	m   map[string]*attempts
	log *zap.Logger
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

// blocked reports whether key may not try a token at now, and for how
// much longer. A block that has ended is forgotten (and logged).
func (l *limiter) blocked(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.m[key]
	if a == nil || a.until.IsZero() {
		return 0, false
	}
	if left := a.until.Sub(now); left > 0 {
		a.refused++
		return left, true
	}
	l.log.Info("web: an address blocked for wrong tokens may try again", zap.String("address", key),
		zap.Int("refused_while_blocked", a.refused))
	delete(l.m, key)
	return 0, false
}

// failed records a wrong token from key at now.
func (l *limiter) failed(key string, now time.Time) {
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
	if now.Sub(a.start) >= LoginWindow {
		*a = attempts{start: now}
	}
	a.n++
	a.last = now
	if a.n >= LoginFailures && a.until.IsZero() {
		a.until = now.Add(LoginBlock)
		l.log.Warn("web: too many wrong tokens from one address; its tokens are refused (429) for a while",
			zap.String("address", key), zap.Int("failures", a.n), zap.Duration("window", LoginWindow), zap.Duration("retry_after", LoginBlock))
	}
}

// evict forgets addresses to make room, a tenth of maxLimited at a time
// (so that a flood of new addresses costs a sort now and then, not a scan
// per request): first those not blocked, the longest quiet first, then
// the blocks that end first.
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
