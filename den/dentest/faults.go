package dentest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/internal/mongoclient"
	"github.com/den-project/den/den/internal/wire"
)

// This file is a proxy that sits between any client (a node, a task
// runner, a CLI command, a test's own client) and the test server and
// does to some of its commands what a replica set does to its clients:
// a reply lost after the write was applied, a "not primary" error, a
// connection dropped, a slow reply, an election.
//
// What the driver does with them (go.mongodb.org/mongo-driver/v2): it
// retries a write once only when the server it talks to supports
// retryable writes, that is when its hello advertises
// logicalSessionTimeoutMinutes AND it is not a standalone server. The
// embedded test server (FerretDB) advertises logicalSessionTimeoutMinutes
// but no replica set name, so the driver sees a standalone and never
// retries a write through this proxy: every injected write fault reaches
// the caller as an error. (That is also the safe choice here: FerretDB
// ignores txnNumber, so a retried write would be applied twice, where a
// replica set answers the retry with the first attempt's result.) Reads
// are retried whatever the server (retryReads defaults to true): once
// without a deadline, and as often as it allows under a context with a
// deadline, which every call of den's has (the driver then retries until
// the deadline, about every half second, each time after a new hello):
// a fault on a find or an aggregate is then seen only when the faults
// last past the deadline, as Refuse's do. A member of a MongoDB replica
// set behind this proxy (DEN_TEST_MONGODB_URI naming one host, with
// directConnection=true: else the driver goes to the members the replica
// set names, around the proxy) would have writes retried the same way: a
// test that counts errors must allow for that.

// Fault is what the proxy does to a command a rule matches.
type Fault int

// The faults.
const (
	// LoseReply forwards the command, reads the server's reply and, if
	// the server ran it (ok: 1; its write is applied), drops the client's
	// connection instead of answering: the client cannot know whether its
	// write landed. A command the server refused does not count as
	// matching: its reply is passed on.
	LoseReply Fault = iota + 1
	// NotWritablePrimary answers, without forwarding, with the error a
	// replica set member that is no longer primary sends: code 10107,
	// with the RetryableWriteError label on writes.
	NotWritablePrimary
	// ReplStateChange answers, without forwarding, with the error a
	// primary that steps down sends for a command it was running: code
	// 11602 (InterruptedDueToReplStateChange), with the
	// RetryableWriteError label on writes.
	ReplStateChange
	// DropBefore drops the client's connection without forwarding: the
	// command was never run.
	DropBefore
	// Delay forwards the command and holds its reply for Rule.Delay.
	Delay
	// Refused answers, without forwarding, with an error the server
	// gives for what was asked rather than for its own state: code 10334
	// (BSONObjectTooLarge, what a write that would grow a document past
	// 16 MiB meets), with no label: the driver does not retry it, and
	// asking again gets the same answer.
	Refused
)

func (f Fault) String() string {
	switch f {
	case LoseReply:
		return "lose-reply"
	case NotWritablePrimary:
		return "not-writable-primary"
	case ReplStateChange:
		return "repl-state-change"
	case DropBefore:
		return "drop-before"
	case Delay:
		return "delay"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Rule says which commands get a fault. A command matches when its name
// and collection are those given (empty: any); handshakes (hello,
// isMaster) match only a rule that names them. Of the matching commands,
// the Nth (counting from 1) gets the fault when Nth is set, else each
// with probability Rate, drawn from the proxy's seeded source. With
// After, a rule applies (and counts commands) only once the proxy has
// injected that many faults: so chained, rules fault a step and then the
// step that would repair it. With Match, a command matches only when
// Match also accepts it: so a rule can pick one step's update of tasks
// by what it sets.
type Rule struct {
	Command    string
	Collection string
	Fault      Fault
	Rate       float64
	Nth        int
	After      int
	// Delay is how long a Delay fault holds the reply.
	Delay time.Duration
	// Match, when set, is given the command's documents as sent: its body
	// first, then each document of its sequences (an update's updates,
	// an insert's documents, when the driver sends them apart).
	Match func(docs []bson.Raw) bool
}

// Injected is one fault the proxy injected, and when.
type Injected struct {
	Command    string
	Collection string
	Fault      Fault
	At         time.Time
}

// FaultProxy is a running fault-injecting proxy.
type FaultProxy struct {
	ln       net.Listener
	upstream string

	mu          sync.Mutex
	rules       []Rule
	seen        []int // matching commands so far, per rule
	rnd         *rand.Rand
	refuseUntil time.Time
	injected    []Injected
	refused     int
	conns       map[net.Conn]struct{}
	closed      bool
	done        chan struct{} // closed by Close: ends delays

	wg sync.WaitGroup
}

// Faults starts a fault-injecting proxy in front of the test server for
// test t, its random draws seeded with seed (the same seed, the same
// draws in the same order of matching commands), with the given rules.
// It stops when the test ends.
func Faults(t testing.TB, seed uint64, rules ...Rule) *FaultProxy {
	t.Helper()
	host, err := uriHost(URI())
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartFaults(host, seed, rules...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartFaults starts a fault-injecting proxy on a free loopback port in
// front of the server at upstream (host:port). Close stops it.
func StartFaults(upstream string, seed uint64, rules ...Rule) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("dentest: fault proxy: listen: %w", err)
	}
	p := &FaultProxy{ln: ln, upstream: upstream, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)), conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.Set(rules...)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// uriHost returns the host:port of a mongodb:// URI naming one host.
func uriHost(uri string) (string, error) {
	rest, ok := strings.CutPrefix(uri, "mongodb://")
	if !ok {
		return "", fmt.Errorf("dentest: fault proxy: %q is not a mongodb:// URI", uri)
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if rest == "" || strings.Contains(rest, ",") {
		return "", fmt.Errorf("dentest: fault proxy: %q must name one host", uri)
	}
	return rest, nil
}

// URI is the proxy's mongodb:// URI, for any node, runner or CLI command.
func (p *FaultProxy) URI() string { return "mongodb://" + p.ln.Addr().String() + "/" }

// Client returns a new client of the server through the proxy, with the
// client options den's node uses (package mongoclient), disconnected when
// the test ends.
func (p *FaultProxy) Client(t testing.TB) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(mongoclient.Options(p.URI(), "dentest through faults"))
	if err != nil {
		t.Fatalf("connect through the fault proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Disconnect(ctx)
	})
	return c
}

// Set replaces the proxy's rules (none: every command goes through), and
// starts their counts of matching commands from zero.
func (p *FaultProxy) Set(rules ...Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append([]Rule(nil), rules...)
	p.seen = make([]int, len(rules))
}

// Refuse makes the server look, for d, like a replica set without a
// primary (an election): it answers commands with the errors a member that
// is not primary gives, NotWritablePrimary (10107, RetryableWriteError on
// writes) to writes and NotPrimaryNoSecondaryOk (13435) to reads, and it
// drops the connection of every handshake (hello, isMaster). A client's
// first command on a connection it holds meets the error; the driver then
// checks the server, finds no primary, and waits for one to send its
// operations to (serverSelectionTimeout). Refuse(0) ends a refusal under
// way.
func (p *FaultProxy) Refuse(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseUntil = time.Now().Add(d)
}

// Injected returns the faults injected so far, in order (refusals are not
// among them: Refused counts them).
func (p *FaultProxy) Injected() []Injected {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Injected(nil), p.injected...)
}

// Refused is how many commands Refuse answered with an error.
func (p *FaultProxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Close stops the proxy and drops its connections.
func (p *FaultProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track adds or removes an open connection; it refuses to add one once
// the proxy is closed.
func (p *FaultProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *FaultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// action is what the proxy does with one request.
type action struct {
	fault  Fault
	delay  time.Duration
	refuse bool
}

// decide picks the action for a command, counting it against the rules:
// before it is forwarded (applied false) every rule but LoseReply's, and
// once the server has applied it (answered ok: 1) LoseReply's.
func (p *FaultProxy) decide(cmd command, applied bool) action {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !applied && time.Now().Before(p.refuseUntil) {
		if cmd.handshake() {
			return action{fault: DropBefore}
		}
		p.refused++
		return action{refuse: true}
	}
	for i, r := range p.rules {
		// Match is asked once a command: before it is forwarded, or, for
		// LoseReply, once it was applied.
		if (r.Fault == LoseReply) != applied || !r.matches(cmd) || len(p.injected) < r.After {
			continue
		}
		p.seen[i]++
		hit := false
		if r.Nth > 0 {
			hit = p.seen[i] == r.Nth
		} else if r.Rate > 0 {
			hit = p.rnd.Float64() < r.Rate
		}
		if hit {
			p.injected = append(p.injected, Injected{Command: cmd.name, Collection: cmd.coll, Fault: r.Fault, At: time.Now()})
			return action{fault: r.Fault, delay: r.Delay}
		}
	}
	return action{}
}

func (r Rule) matches(c command) bool {
	if r.Command == "" {
		if c.handshake() {
			return false
		}
	} else if r.Command != c.name {
		return false
	}
	if r.Collection != "" && r.Collection != c.coll {
		return false
	}
	return r.Match == nil || r.Match(sections(c.req))
}

// sections returns an OP_MSG's documents: its body (kind 0) and the
// documents of its sequences (kind 1), in order; nil for anything else.
func sections(msg []byte) []bson.Raw {
	if wire.OpCode(msg) != wire.OpMsg || len(msg) < wire.HeaderLen+4 {
		return nil
	}
	end := len(msg)
	if binary.LittleEndian.Uint32(msg[wire.HeaderLen:])&1 != 0 { // checksumPresent
		end -= 4
	}
	var docs []bson.Raw
	doc := func(b []byte) (bson.Raw, int) {
		if len(b) < 5 {
			return nil, 0
		}
		n := int(binary.LittleEndian.Uint32(b))
		if n < 5 || n > len(b) {
			return nil, 0
		}
		return bson.Raw(b[:n]), n
	}
	for i := wire.HeaderLen + 4; i < end; {
		kind := msg[i]
		i++
		switch kind {
		case 0:
			d, n := doc(msg[i:end])
			if n == 0 {
				return docs
			}
			docs = append(docs, d)
			i += n
		case 1:
			if end-i < 4 {
				return docs
			}
			size := int(binary.LittleEndian.Uint32(msg[i:]))
			if size < 4 || i+size > end {
				return docs
			}
			seq := msg[i+4 : i+size]
			j := bytes.IndexByte(seq, 0)
			if j < 0 {
				return docs
			}
			for seq = seq[j+1:]; len(seq) > 0; {
				d, n := doc(seq)
				if n == 0 {
					break
				}
				docs = append(docs, d)
				seq = seq[n:]
			}
			i += size
		default:
			return docs
		}
	}
	return docs
}

func (p *FaultProxy) handle(client net.Conn) {
	defer client.Close()
	if !p.track(client, true) {
		return
	}
	defer p.track(client, false)
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(up, true) {
		return
	}
	defer p.track(up, false)
	for {
		req, err := wire.Read(client)
		if err != nil {
			return
		}
		cmd := parseCommand(req)
		act := p.decide(cmd, false)
		switch {
		case act.refuse:
			if _, err := client.Write(errorReply(req, cmd, refusal(cmd))); err != nil {
				return
			}
			continue
		case act.fault == DropBefore:
			return
		case act.fault == NotWritablePrimary || act.fault == ReplStateChange || act.fault == Refused:
			if _, err := client.Write(errorReply(req, cmd, act.fault)); err != nil {
				return
			}
			continue
		}
		if _, err := up.Write(req); err != nil {
			return
		}
		if wire.MoreToCome(req) {
			continue // an unacknowledged write: no reply to lose
		}
		var replies [][]byte
		for {
			r, err := wire.Read(up)
			if err != nil {
				return
			}
			replies = append(replies, r)
			if !wire.MoreToCome(r) {
				break
			}
		}
		if replyOK(replies[len(replies)-1]) && p.decide(cmd, true).fault == LoseReply {
			return
		}
		switch act.fault {
		case Delay:
			select {
			case <-time.After(act.delay):
			case <-p.done:
				return
			}
		}
		for _, r := range replies {
			if _, err := client.Write(r); err != nil {
				return
			}
		}
	}
}

// Wire protocol (OP_MSG) as far as the proxy needs it.
// command is what the proxy knows of a request: the command's name, its
// collection (the first value, when a string), and whether it is an
// OP_MSG (only those get error replies; a legacy OP_QUERY, which drivers
// use for the first handshake only, is always forwarded).
type command struct {
	name, coll string
	msg        bool
	req        []byte
}

func (c command) handshake() bool {
	switch c.name {
	case "hello", "isMaster", "ismaster":
		return true
	}
	return !c.msg
}

// write reports whether a command writes documents.
func (c command) write() bool {
	switch c.name {
	case "insert", "update", "delete", "findAndModify":
		return true
	}
	return false
}

func parseCommand(msg []byte) command {
	name, coll := wire.Command(msg)
	return command{name: name, coll: coll, msg: wire.OpCode(msg) == wire.OpMsg, req: msg}
}

// replyOK reports whether a reply is an OP_MSG whose body says ok: 1 (a
// command the server ran; its writes may still hold write errors).
func replyOK(msg []byte) bool {
	v, err := wire.Body(msg).LookupErr("ok")
	if err != nil {
		return false
	}
	n, ok := v.AsFloat64OK()
	return ok && n == 1
}

// refusal is the fault an election gives a command.
func refusal(c command) Fault {
	if c.write() {
		return NotWritablePrimary
	}
	return notPrimaryNoSecondaryOk
}

// notPrimaryNoSecondaryOk is the error a secondary gives a read with a
// primary read preference; not a Fault rules can name.
const notPrimaryNoSecondaryOk Fault = -1

// errorReply is the OP_MSG reply to req with the error for f.
func errorReply(req []byte, c command, f Fault) []byte {
	doc := bson.D{{Key: "ok", Value: 0.0}}
	switch f {
	case NotWritablePrimary:
		doc = append(doc, bson.E{Key: "errmsg", Value: "not primary"}, bson.E{Key: "code", Value: int32(10107)}, bson.E{Key: "codeName", Value: "NotWritablePrimary"})
	case ReplStateChange:
		doc = append(doc, bson.E{Key: "errmsg", Value: "operation was interrupted because of a replication state change"}, bson.E{Key: "code", Value: int32(11602)}, bson.E{Key: "codeName", Value: "InterruptedDueToReplStateChange"})
	case Refused:
		doc = append(doc, bson.E{Key: "errmsg", Value: "BSONObj size: 16793700 (0x1004164) is invalid. Size must be between 0 and 16793600(16MB)"}, bson.E{Key: "code", Value: int32(10334)}, bson.E{Key: "codeName", Value: "BSONObjectTooLarge"})
	default:
		doc = append(doc, bson.E{Key: "errmsg", Value: "not primary and secondaryOk=false"}, bson.E{Key: "code", Value: int32(13435)}, bson.E{Key: "codeName", Value: "NotPrimaryNoSecondaryOk"})
	}
	if c.write() && f != notPrimaryNoSecondaryOk && f != Refused {
		doc = append(doc, bson.E{Key: "errorLabels", Value: bson.A{"RetryableWriteError"}})
	}
	body, err := bson.Marshal(doc)
	if err != nil {
		panic(err) // a fixed document
	}
	out := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(body))
	binary.LittleEndian.PutUint32(out[4:], uint32(rand.Int32()))
	copy(out[8:12], req[4:8]) // responseTo: the request's id
	binary.LittleEndian.PutUint32(out[12:], wire.OpMsg)
	// flagBits 0, then section kind 0 (the body).
	out = append(out, body...)
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	return out
}

// CountCommands starts a proxy that faults nothing and counts the commands of
// the given name on the given collection whose documents mention text
// (a field, an operator, "$status" for a grouping by status), so that a
// test can tell how often a read reached the server.
func CountCommands(t testing.TB, command, collection, text string) (*FaultProxy, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	return Faults(t, 1, Counting(command, collection, text, &n)), &n
}

// Counting is a rule of a fault proxy that injects nothing and adds one
// to n for each command named command on collection whose body, or one
// of its documents sent apart (an update's statements), holds text (as
// CountCommands counts): a proxy given several counts each.
func Counting(command, collection, text string, n *atomic.Int64) Rule {
	return Rule{Command: command, Collection: collection, Match: func(docs []bson.Raw) bool {
		if slices.ContainsFunc(docs, func(d bson.Raw) bool { return strings.Contains(d.String(), text) }) {
			n.Add(1)
		}
		return false
	}}
}
