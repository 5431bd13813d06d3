package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/den-project/den/den/internal/mongoclient"
)

// Every read has a bound: the page's here, the Disbatch web API's
// (den/web/dci) with the same pieces. A read (a GET of a page, its
// output, its JSON) waits for a place in a ReadGate, at most ReadsPerClient
// per client address and Reads in all, each waiting at most GateWait;
// then its context gets a deadline (Options.ReadTimeout), which the
// MongoDB driver sends with every command as maxTimeMS, so the database
// stops the read too. A download of a whole output (output.txt) gets
// DownloadTimeout instead: it streams as long as the client reads.
//
// When a read fails, DBFailureOf tells what it says: the client went away
// (logged at debug, nothing else), the database is up but did not answer
// in time (503 with Retry-After for that request alone), the database
// cannot be reached (the outage, outage.go), or the database refused what
// was asked.
const (
	// ReadTimeout is a page request's deadline unless Options say
	// otherwise: every database command it sends carries what is left of
	// it as maxTimeMS.
	ReadTimeout = 10 * time.Second
	// DownloadTimeout bounds a download of a whole output (output.txt).
	DownloadTimeout = 10 * time.Minute
	// ReadsPerClient and Reads bound the page's reads running at once,
	// per client address (limit.go's, an IPv6 client by its /64) and in
	// all; GateWait is how long a read waits for its place before it is
	// answered 429 (its address has its most) or 503 (den web has).
	ReadsPerClient = 4
	Reads          = 16
	GateWait       = 2 * time.Second
	// BodyTimeout bounds how long a request's body may take to arrive,
	// from when the handler has its headers (the server gives the headers
	// 10 s): a client that sends a body slowly, or not at all, holds its
	// connection this long at most.
	BodyTimeout = 10 * time.Second
)

// BusyError is a read refused because too many run at once: from the
// client's address (PerClient: 429) or in all (503). Both say when to
// come back, in Retry-After.
type BusyError struct {
	What      string // reads, searches
	PerClient bool
	Limit     int
	Wait      time.Duration
}

func (e *BusyError) Error() string {
	if e.PerClient {
		return fmt.Sprintf("too many %s at once from your address: at most %d run at once, and this one waited %s for its turn; retry when one has ended", e.What, e.Limit, e.Wait)
	}
	return fmt.Sprintf("den web is busy: at most %d %s run at once, and this one waited %s for its turn; retry shortly", e.Limit, e.What, e.Wait)
}

// Status is the HTTP status of the refusal: 429 for the client's own
// reads, 503 for everyone's.
func (e *BusyError) Status() int {
	if e.PerClient {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// RetryAfter is the Retry-After header's value: one second.
func (e *BusyError) RetryAfter() string { return "1" }

// ReadGate bounds the reads that run at once, per client address and in
// all. A read holds its place from before its body is read until its
// answer is written, so the bound is also one on the memory reads hold.
type ReadGate struct {
	what      string
	perClient int
	all       chan struct{}
	wait      time.Duration

	mu      sync.Mutex
	clients map[string]*clientReads // addresses with a read running or waiting
}

type clientReads struct {
	places chan struct{}
	users  int // reads running or waiting
}

// NewReadGate returns a gate of perClient reads per client address and
// overall reads in all, each waiting at most wait for its place; what
// names them in its refusals ("reads", "searches").
func NewReadGate(what string, perClient, overall int, wait time.Duration) *ReadGate {
	return &ReadGate{what: what, perClient: perClient, all: make(chan struct{}, overall), wait: wait, clients: map[string]*clientReads{}}
}

// Enter waits for the request's place; release gives it back. The error
// is a *BusyError, or the request's context's when it ends first.
func (g *ReadGate) Enter(r *http.Request) (release func(), err error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	key := clientKey(r)
	g.mu.Lock()
	c := g.clients[key]
	if c == nil {
		c = &clientReads{places: make(chan struct{}, g.perClient)}
		g.clients[key] = c
	}
	c.users++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if c.users--; c.users == 0 {
			delete(g.clients, key)
		}
		g.mu.Unlock()
	}
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case c.places <- struct{}{}:
	case <-timer.C:
		leave()
		return nil, &BusyError{What: g.what, PerClient: true, Limit: g.perClient, Wait: g.wait}
	case <-r.Context().Done():
		leave()
		return nil, r.Context().Err()
	}
	select {
	case g.all <- struct{}{}:
	case <-timer.C:
		<-c.places
		leave()
		return nil, &BusyError{What: g.what, Limit: cap(g.all), Wait: g.wait}
	case <-r.Context().Done():
		<-c.places
		leave()
		return nil, r.Context().Err()
	}
	return func() {
		<-g.all
		<-c.places
		leave()
	}, nil
}

// clientCount is how many addresses the gate holds now (for tests).
func (g *ReadGate) clientCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.clients)
}

// DBFailure is what a failed read says about the database.
type DBFailure int

const (
	// DBRefused: the database answered, and refused what was asked (or
	// the failure is not the database's at all).
	DBRefused DBFailure = iota
	// DBAbandoned: the client went away (its request's context was
	// canceled): nothing is said about the database, nothing answered.
	DBAbandoned
	// DBSlow: the request's deadline passed (or the server's maxTimeMS,
	// or a socket's timeout): the database is up but did not answer in
	// time. That request alone gets 503 with Retry-After.
	DBSlow
	// DBDown: no server could be selected, or the connection failed: the
	// database cannot be reached.
	DBDown
)

func (f DBFailure) String() string {
	switch f {
	case DBAbandoned:
		return "abandoned"
	case DBSlow:
		return "slow"
	case DBDown:
		return "down"
	}
	return "refused"
}

// DBFailureOf tells what err, the failure of a read done under ctx (the
// request's), says. The order matters: a client that left is never taken
// for a failing database, whatever error its canceled read gave; a read
// that found no server is the database's failure even when the request's
// deadline ended the search; any other read that ran out of time is slow.
func DBFailureOf(ctx context.Context, err error) DBFailure {
	if err == nil {
		return DBRefused
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return DBAbandoned
	}
	var sel topology.ServerSelectionError
	if errors.As(err, &sel) {
		return DBDown
	}
	// A connection the server dropped is an outage even when the
	// request's time ran out meanwhile (the driver retried the read).
	if mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		return DBDown
	}
	if ctx.Err() != nil || mongo.IsTimeout(err) {
		return DBSlow
	}
	if mongoclient.Unreachable(err) {
		return DBDown
	}
	return DBRefused
}

// SlowAnswer is what a request whose read ran out of time is told, and
// the Retry-After it gets with it.
func SlowAnswer(limit time.Duration) (msg, retryAfter string) {
	return fmt.Sprintf("the database did not answer within this request's time limit (%s); it is up, but busy or the read is costly: retry, or ask for less", limit),
		strconv.Itoa(int(SlowRetryAfter.Seconds()))
}

// SlowRetryAfter is the Retry-After of an answer to a read that ran out
// of time.
const SlowRetryAfter = 5 * time.Second
