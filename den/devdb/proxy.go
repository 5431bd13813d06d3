package devdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/den-project/den/den/internal/wire"
)

const (
	// commandTimeout is the longest the proxy waits for the server's reply
	// to one command. The lock that makes the server run one command at
	// a time in the command's database is held meanwhile: a command the
	// server never answers would otherwise stop every client of that
	// database for good. Past it, the proxy closes that
	// client's connections (its driver sees a network error and retries
	// or fails) and says so on the server's log.
	commandTimeout = 2 * time.Minute
)

// proxy accepts MongoDB client connections and forwards each to its own
// upstream connection. For a command that may write, it holds its
// database's lock from the moment the request is written upstream until
// its reply has been read back, so the upstream server runs one such
// command at a time in each database: every single-document operation is
// atomic, as the Disbatch protocol needs, while commands on other
// databases (the test suite's, one per test) go on beside it. Reads take
// no lock (readonly.go).
type proxy struct {
	ln       net.Listener
	network  string // upstream's: "unix" (FerretDB's socket) or "tcp"
	upstream string
	// backend, when set, says when the engine under the upstream server
	// is down (its PostgreSQL died and is being restarted): the proxy
	// then drops the connection of each command instead of forwarding
	// it, so that clients see the database unreachable, as a MongoDB
	// that went away, and retry (not an error of the command itself).
	backend interface{ isDown() bool }
	serial  bool  // run one write at a time per database upstream
	locks   locks // the databases' locks
	wg      sync.WaitGroup
	connsMu sync.Mutex
	conns   map[net.Conn]struct{}

	statsMu sync.Mutex
	stats   Stats

	logOut io.Writer // where a command the server did not answer is told; nil: nowhere
	// after, when set, is called with each command's database and name
	// once its reply is read, still under the database's lock (the
	// PostgreSQL engine's index upkeep).
	after func(db, name string)
	// fast, when set, answers some reads from PostgreSQL (fastpath.go).
	fast *fastPaths
}

// tryLockedDB runs fn while no command runs in database db, if no command
// runs there now; it reports whether it ran fn.
func (p *proxy) tryLockedDB(db string, fn func()) bool {
	if p.serial {
		unlock, ok := p.locks.tryDB(db)
		if !ok {
			return false
		}
		defer unlock()
	}
	fn()
	return true
}

// locks serialize commands per database.
type locks struct {
	mu  sync.Mutex
	dbs map[string]*dbLock
}

// dbLock is one database's lock, kept while a command holds or waits for
// it (a test suite makes thousands of databases, each used for a while).
type dbLock struct {
	sync.Mutex
	users int
}

// db locks database name, and returns the function that unlocks it.
func (l *locks) db(name string) (unlock func()) {
	d := l.use(name)
	d.Lock()
	return func() {
		d.Unlock()
		l.done(name, d)
	}
}

// tryDB locks database name if no one holds or waits for its lock, and
// returns the function that unlocks it.
func (l *locks) tryDB(name string) (unlock func(), ok bool) {
	l.mu.Lock()
	if l.dbs[name] != nil {
		l.mu.Unlock()
		return nil, false
	}
	l.mu.Unlock()
	d := l.use(name)
	if !d.TryLock() {
		l.done(name, d)
		return nil, false
	}
	return func() {
		d.Unlock()
		l.done(name, d)
	}, true
}

// use counts a user of database name's lock, making the lock if needed.
func (l *locks) use(name string) *dbLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dbs == nil {
		l.dbs = map[string]*dbLock{}
	}
	d := l.dbs[name]
	if d == nil {
		d = &dbLock{}
		l.dbs[name] = d
	}
	d.users++
	return d
}

// done counts a user of database name's lock gone, forgetting the lock
// when it was the last.
func (l *locks) done(name string, d *dbLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.users--; d.users == 0 {
		delete(l.dbs, name)
	}
}

// Stats counts what clients sent through the proxy: for benchmarks, which
// need the cost of a workload at the wire.
type Stats struct {
	// Connections is how many client connections were accepted.
	Connections int64
	// Commands counts requests by command name (the first key of the
	// command document), handshakes (hello) included.
	Commands map[string]int64
	// Busy is the time the server spent on commands, from the request's
	// write to its last reply's read, by command name and collection
	// ("findAndModify tasks"); handshakes are left out. Calls counts the
	// same commands by the same keys.
	Busy  map[string]time.Duration
	Calls map[string]int64
}

// Total is the number of commands, handshakes included.
func (s Stats) Total() int64 {
	var n int64
	for _, c := range s.Commands {
		n += c
	}
	return n
}

// Sub returns the counts of s since earlier.
func (s Stats) Sub(earlier Stats) Stats {
	out := Stats{Connections: s.Connections - earlier.Connections, Commands: map[string]int64{}, Busy: map[string]time.Duration{}, Calls: map[string]int64{}}
	for k, v := range s.Calls {
		if d := v - earlier.Calls[k]; d != 0 {
			out.Calls[k] = d
		}
	}
	for k, v := range s.Commands {
		if d := v - earlier.Commands[k]; d != 0 {
			out.Commands[k] = d
		}
	}
	for k, v := range s.Busy {
		if d := v - earlier.Busy[k]; d != 0 {
			out.Busy[k] = d
		}
	}
	return out
}

func (p *proxy) count(name string, conn bool) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	if p.stats.Commands == nil {
		p.stats.Commands = map[string]int64{}
	}
	if conn {
		p.stats.Connections++
		return
	}
	p.stats.Commands[name]++
}

func (p *proxy) busy(key string, d time.Duration) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	if p.stats.Busy == nil {
		p.stats.Busy = map[string]time.Duration{}
		p.stats.Calls = map[string]int64{}
	}
	p.stats.Busy[key] += d
	p.stats.Calls[key]++
}

func (p *proxy) snapshot() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	out := Stats{Connections: p.stats.Connections, Commands: map[string]int64{}, Busy: map[string]time.Duration{}, Calls: map[string]int64{}}
	for k, v := range p.stats.Commands {
		out.Commands[k] = v
	}
	for k, v := range p.stats.Busy {
		out.Busy[k] = v
	}
	for k, v := range p.stats.Calls {
		out.Calls[k] = v
	}
	return out
}

func newProxy(ln net.Listener, network, upstream string) *proxy {
	return &proxy{ln: ln, network: network, upstream: upstream, serial: true, conns: map[net.Conn]struct{}{}}
}

// serve accepts connections until ctx is done, then closes them all.
func (p *proxy) serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		p.ln.Close()
		p.connsMu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.connsMu.Unlock()
	}()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			// A temporary failure (out of file descriptors): wait, go on.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(ctx, c)
		}()
	}
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn, add bool) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *proxy) handle(ctx context.Context, client net.Conn) {
	defer client.Close()
	p.count("", true)
	p.track(client, true)
	defer p.track(client, false)
	var d net.Dialer
	up, err := d.DialContext(ctx, p.network, p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	p.track(up, true)
	defer p.track(up, false)
	for {
		req, err := wire.Read(client)
		if err != nil {
			return
		}
		replies, err := p.roundTrip(ctx, up, req)
		if err != nil {
			return
		}
		for _, r := range replies {
			if _, err := client.Write(r); err != nil {
				return
			}
		}
	}
}

// roundTrip sends one request upstream and reads its replies, under its
// database's lock unless it only reads (readonly.go): handshakes (hello,
// isMaster), so that the driver's monitoring never waits behind a
// command, and every read, so that no view waits behind the writes nor
// holds them up. A read the fast paths answer (fastpath.go) is answered
// from PostgreSQL instead.
func (p *proxy) roundTrip(ctx context.Context, up net.Conn, req []byte) ([][]byte, error) {
	name, coll := wire.Command(req)
	db := wire.Database(req)
	p.count(name, false)
	if !handshake(name) {
		read := readOnly(name, req)
		if p.serial && !read {
			asked := time.Now()
			defer p.locks.db(db)()
			if waited := time.Since(asked); waited > commandTimeout && p.logOut != nil {
				// Commands hold the lock at most commandTimeout each: a
				// longer wait is a queue of them, or upkeep (the
				// PostgreSQL engine's indexes) held it that long.
				fmt.Fprintf(p.logOut, "devdb: %s %s waited %s for database %s's lock\n", name, coll, waited.Round(time.Second), db)
			}
		}
		if p.backend != nil && p.backend.isDown() {
			return nil, errBackendDown
		}
		start := time.Now()
		defer func() { p.busy(strings.TrimSpace(name+" "+coll), time.Since(start)) }()
		if read && p.fast != nil {
			reply, ok, err := p.fast.answer(ctx, up, req)
			if err != nil {
				return nil, err
			}
			if ok {
				return [][]byte{reply}, nil
			}
		}
	}
	if _, err := up.Write(req); err != nil {
		return nil, err
	}
	if wire.MoreToCome(req) {
		return nil, nil // fire-and-forget write: no reply
	}
	var replies [][]byte
	if err := up.SetReadDeadline(time.Now().Add(commandTimeout)); err != nil {
		return nil, err
	}
	for {
		r, err := wire.Read(up)
		if errors.Is(err, os.ErrDeadlineExceeded) && p.logOut != nil {
			fmt.Fprintf(p.logOut, "devdb: no reply to %s %s within %s; dropping its connection\n", name, coll, commandTimeout)
		}
		if err != nil {
			return nil, err
		}
		if !handshake(name) && !readOnly(name, req) {
			r = mongoDuplicates(r)
		}
		replies = append(replies, r)
		if !wire.MoreToCome(r) {
			if p.after != nil && !handshake(name) && !readOnly(name, req) {
				p.after(db, name)
			}
			return replies, nil
		}
	}
}

// errBackendDown ends a client's connection while the engine is down.
var errBackendDown = errors.New("devdb: the database's engine is down")

// handshake reports whether a command is a hello/isMaster, which changes
// nothing.
func handshake(name string) bool {
	switch name {
	case "hello", "isMaster", "ismaster":
		return true
	}
	return false
}

// Counter is a proxy in front of any MongoDB server that counts what
// clients send through it, without serializing anything: benchmarks use
// it to count a node's commands against a real MongoDB (no TLS: it
// forwards bytes).
type Counter struct {
	p    *proxy
	done chan struct{}
}

// Count starts a counting proxy on a free loopback port, forwarding to
// upstream (host:port), until ctx is done.
func Count(ctx context.Context, upstream string) (*Counter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devdb: counting proxy: %w", err)
	}
	p := newProxy(ln, "tcp", upstream)
	p.serial = false
	c := &Counter{p: p, done: make(chan struct{})}
	go func() { defer close(c.done); p.serve(ctx) }()
	return c, nil
}

// Addr is the proxy's host:port.
func (c *Counter) Addr() string { return c.p.ln.Addr().String() }

// Stats returns what clients have sent so far.
func (c *Counter) Stats() Stats { return c.p.snapshot() }

// Done is closed once the proxy has stopped.
func (c *Counter) Done() <-chan struct{} { return c.done }
