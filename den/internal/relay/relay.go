package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Limits the relay advertises and enforces.
const (
	// defaultMaxMessage is MongoDB's maxMessageSizeBytes, used until the
	// upstream hello says otherwise.
	defaultMaxMessage = 48000000
	// maxBatch caps the maxWriteBatchSize the relay advertises. A batch
	// that arrives as an OP_MSG document sequence is folded into the
	// command as an array, which costs up to 7 bytes per document (type
	// byte and index key); with the message capped at maxBsonObjectSize
	// and at most 2000 documents, the folded command stays under
	// MongoDB's limit for command documents (maxBsonObjectSize + 16 KiB).
	maxBatch = 2000
	// maxSessions bounds the node-side sessions one peer may hold.
	maxSessions = 10000
	// drainTime is how long Close lets commands in flight finish.
	drainTime = 5 * time.Second
)

// stripped are the driver's envelope fields, which the relay's own client
// sets for itself (or which make no sense through the relay).
var stripped = map[string]bool{
	"$db": true, "lsid": true, "$clusterTime": true, "txnNumber": true, "$readPreference": true,
	"apiVersion": true, "apiStrict": true, "apiDeprecationErrors": true, "$audit": true,
}

// Relay runs the commands of wire-protocol clients through one
// *mongo.Client. The zero value is not usable; call New.
type Relay struct {
	client *mongo.Client
	log    *zap.Logger

	helloMu sync.Mutex
	limits  *limits // from the upstream hello; nil until fetched

	maxMessage atomic.Int64
	requestIDs atomic.Int32
	connIDs    atomic.Int64

	lifeMu sync.Mutex // orders goServe's wg.Add before Close's Wait
	// ctx ends when Close is called: connections stop reading requests.
	ctx    context.Context
	cancel context.CancelFunc
	// cmdCtx is the context of commands: it ends drainTime after ctx, so
	// that a graceful stop lets commands in flight finish and reply.
	cmdCtx    context.Context
	cmdCancel context.CancelFunc
	wg        sync.WaitGroup
}

// limits are the values of the upstream hello the relay passes on.
type limits struct {
	maxBSON, maxMessage, maxBatch int64
	minWire, maxWire              bson.RawValue
	sessionMinutes                bson.RawValue // zero when the server has no sessions
}

// New returns a relay running commands through client. Close stops
// everything it serves.
func New(client *mongo.Client, log *zap.Logger) *Relay {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Relay{client: client, log: log}
	r.maxMessage.Store(defaultMaxMessage)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.cmdCtx, r.cmdCancel = context.WithCancel(context.Background())
	return r
}

// Close stops serving: each connection finishes the command it is running
// (for up to drainTime), sends its reply and is closed; sessions are ended.
// It does not disconnect the client.
func (r *Relay) Close() {
	r.lifeMu.Lock()
	r.cancel()
	r.lifeMu.Unlock()
	drained := time.AfterFunc(drainTime, r.cmdCancel)
	r.wg.Wait()
	drained.Stop()
	r.cmdCancel()
}

// goServe runs f in a goroutine Close waits for; false when the relay is
// closed.
func (r *Relay) goServe(f func(ctx context.Context)) bool {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.ctx.Err() != nil {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f(r.ctx)
	}()
	return true
}

// Peer is one client process: its connections share the mapping of its
// logical sessions (lsid) to sessions of the relay's client, so that a
// getMore or killCursors runs in the session of the command that made its
// cursor, as the server requires, whichever connection it arrives on.
type Peer struct {
	r   *Relay
	log *zap.Logger

	mu       sync.Mutex
	closed   bool
	sessions map[string]*session
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

type session struct {
	mu sync.Mutex // a session serves one command at a time
	s  *mongo.Session
}

// NewPeer returns a peer whose connections run their commands through r.
func (r *Relay) NewPeer(log *zap.Logger) *Peer {
	if log == nil {
		log = r.log
	}
	return &Peer{r: r, log: log, sessions: map[string]*session{}, conns: map[net.Conn]struct{}{}}
}

// Serve serves conn in a goroutine until the client closes it, a message
// is malformed, or ctx or the peer ends (then after the reply to the
// command in flight). It closes conn.
func (p *Peer) Serve(ctx context.Context, conn net.Conn) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return
	}
	p.conns[conn] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			delete(p.conns, conn)
			p.mu.Unlock()
			conn.Close()
		}()
		stop := context.AfterFunc(ctx, func() { stopReading(conn) })
		defer stop()
		p.serve(ctx, conn)
	}()
}

// Close stops the peer's connections (each after replying to the command
// in flight), waits for them, and ends its sessions (which returns them to
// the client's pool; nothing is sent to the server).
func (p *Peer) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		stopReading(c)
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, s := range p.sessions {
		s.mu.Lock()
		s.s.EndSession(context.Background())
		s.mu.Unlock()
		delete(p.sessions, k)
	}
}

// stopReading makes conn's pending and future reads fail at once, and
// bounds the time left to write a reply.
func stopReading(conn net.Conn) {
	conn.SetReadDeadline(time.Now())
	conn.SetWriteDeadline(time.Now().Add(drainTime))
}

func (p *Peer) serve(ctx context.Context, conn net.Conn) {
	for {
		raw, err := readMessage(conn, int(p.r.maxMessage.Load()))
		if err != nil {
			// A runner that exits with a reply unread resets the
			// connection (ECONNRESET): an end, like EOF.
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) &&
				!errors.Is(err, syscall.ECONNRESET) && ctx.Err() == nil {
				p.log.Warn("relay: closing a connection that sent an unreadable message", zap.Error(err))
			}
			return
		}
		m, err := parseMessage(raw)
		if err != nil {
			p.log.Warn("relay: closing a connection that sent a malformed message", zap.Error(err))
			return
		}
		reply := p.handle(p.r.cmdCtx, m)
		if m.moreToCome {
			continue
		}
		id := p.r.requestIDs.Add(1)
		var out []byte
		if m.query {
			out = queryReply(id, m.requestID, reply)
		} else {
			out = msgReply(id, m.requestID, reply)
		}
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

// handle runs one command and returns its reply document.
func (p *Peer) handle(ctx context.Context, m message) bson.Raw {
	first, err := m.body.IndexErr(0)
	if err != nil {
		return errorReply("den relay: empty command", 0)
	}
	name := first.Key()
	switch name {
	case "hello", "isMaster", "ismaster":
		return p.r.hello(ctx, name, m.body)
	}
	if m.query {
		return errorReply("den relay: OP_QUERY is only supported for the handshake (hello/isMaster)", 0)
	}
	switch name {
	case "ping":
		return okReply()
	case "endSessions":
		p.endSessions(m.body)
		return okReply()
	case "startTransaction", "commitTransaction", "abortTransaction":
		return errorReply("den relay: transactions are not supported through the node's relay (set runner.relay: false to connect task runners directly)", 0)
	}
	if m.body.Lookup("startTransaction").Type != 0 || m.body.Lookup("autocommit").Type != 0 {
		return errorReply("den relay: transactions are not supported through the node's relay (set runner.relay: false to connect task runners directly)", 0)
	}
	db, ok := m.body.Lookup("$db").StringValueOK()
	if !ok || db == "" {
		return errorReply("den relay: command without $db", 0)
	}
	cmd, lsid := strip(m.body)
	rctx := ctx
	if lsid != nil {
		s, err := p.session(lsid)
		if err != nil {
			return errorReply("den relay: "+err.Error(), 0)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		rctx = mongo.NewSessionContext(ctx, s.s)
	}
	raw, err := p.r.client.Database(db).RunCommand(rctx, cmd).Raw()
	if len(raw) >= 5 {
		return raw // the server's own reply, error or not
	}
	if err == nil {
		return errorReply("den relay: empty reply from MongoDB", 0)
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		d := bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: ce.Message}, {Key: "code", Value: ce.Code}, {Key: "codeName", Value: ce.Name}}
		if len(ce.Labels) > 0 {
			d = append(d, bson.E{Key: "errorLabels", Value: ce.Labels})
		}
		b, _ := bson.Marshal(d)
		return b
	}
	return errorReply("den relay: running "+name+" through the node: "+err.Error(), 0)
}

// strip returns the command without the driver's envelope fields, and its
// lsid, if any.
func strip(body bson.Raw) (bson.Raw, bson.Raw) {
	elems, _ := body.Elements() // validated by the parser
	out := make([]byte, 4, len(body))
	var lsid bson.Raw
	for _, e := range elems {
		k := e.Key()
		if k == "lsid" {
			lsid, _ = e.Value().DocumentOK()
		}
		if stripped[k] {
			continue
		}
		out = append(out, e...)
	}
	out = append(out, 0)
	out[0], out[1], out[2], out[3] = byte(len(out)), byte(len(out)>>8), byte(len(out)>>16), byte(len(out)>>24)
	return out, lsid
}

// sessionKey identifies an lsid: its id's bytes, else the whole document.
func sessionKey(lsid bson.Raw) string {
	if _, data, ok := lsid.Lookup("id").BinaryOK(); ok {
		return string(data)
	}
	return string(lsid)
}

func (p *Peer) session(lsid bson.Raw) (*session, error) {
	key := sessionKey(lsid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[key]; s != nil {
		return s, nil
	}
	if p.closed {
		return nil, errors.New("connection closing")
	}
	if len(p.sessions) >= maxSessions {
		return nil, errors.New("too many logical sessions on one relay peer")
	}
	s, err := p.r.client.StartSession(options.Session().SetCausalConsistency(false))
	if err != nil {
		return nil, err
	}
	p.sessions[key] = &session{s: s}
	return p.sessions[key], nil
}

// endSessions ends the node-side sessions of the lsids the client ends:
// they go back to the client's pool, and nothing is sent upstream.
func (p *Peer) endSessions(body bson.Raw) {
	arr, ok := body.Lookup("endSessions").ArrayOK()
	if !ok {
		return
	}
	vals, _ := arr.Values()
	for _, v := range vals {
		lsid, ok := v.DocumentOK()
		if !ok {
			continue
		}
		key := sessionKey(lsid)
		p.mu.Lock()
		s := p.sessions[key]
		delete(p.sessions, key)
		p.mu.Unlock()
		if s != nil {
			s.mu.Lock()
			s.s.EndSession(context.Background())
			s.mu.Unlock()
		}
	}
}

// hello answers a handshake locally: a standalone server with the
// upstream server's limits (fetched once), no compression, no
// authentication, no streaming.
func (r *Relay) hello(ctx context.Context, name string, body bson.Raw) bson.Raw {
	l, err := r.upstreamLimits(ctx)
	if err != nil {
		return errorReply("den relay: cannot reach MongoDB through the node: "+err.Error(), 0)
	}
	primary := "isWritablePrimary"
	if name != "hello" {
		primary = "ismaster"
	}
	d := bson.D{{Key: primary, Value: true}}
	if body.Lookup("helloOk").Type != 0 {
		d = append(d, bson.E{Key: "helloOk", Value: true})
	}
	d = append(d,
		bson.E{Key: "maxBsonObjectSize", Value: l.maxBSON},
		bson.E{Key: "maxMessageSizeBytes", Value: min(l.maxMessage, l.maxBSON)},
		bson.E{Key: "maxWriteBatchSize", Value: min(l.maxBatch, maxBatch)},
		bson.E{Key: "localTime", Value: time.Now()},
	)
	if l.sessionMinutes.Type != 0 {
		d = append(d, bson.E{Key: "logicalSessionTimeoutMinutes", Value: l.sessionMinutes})
	}
	d = append(d,
		bson.E{Key: "connectionId", Value: r.connIDs.Add(1)},
		bson.E{Key: "minWireVersion", Value: l.minWire},
		bson.E{Key: "maxWireVersion", Value: l.maxWire},
		bson.E{Key: "readOnly", Value: false},
		bson.E{Key: "ok", Value: 1.0},
	)
	b, err := bson.Marshal(d)
	if err != nil {
		return errorReply("den relay: encode hello reply: "+err.Error(), 0)
	}
	return b
}

// upstreamLimits runs one hello upstream, the first time it is needed
// (and again after a failure), and keeps the limits it reports.
func (r *Relay) upstreamLimits(ctx context.Context) (*limits, error) {
	r.helloMu.Lock()
	defer r.helloMu.Unlock()
	if r.limits != nil {
		return r.limits, nil
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := r.client.Database("admin").RunCommand(hctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return nil, err
	}
	num := func(key string, def int64) int64 {
		if v, ok := raw.Lookup(key).AsInt64OK(); ok && v > 0 {
			return v
		}
		return def
	}
	l := &limits{
		maxBSON:        num("maxBsonObjectSize", 16<<20),
		maxMessage:     num("maxMessageSizeBytes", defaultMaxMessage),
		maxBatch:       num("maxWriteBatchSize", 100000),
		minWire:        raw.Lookup("minWireVersion"),
		maxWire:        raw.Lookup("maxWireVersion"),
		sessionMinutes: raw.Lookup("logicalSessionTimeoutMinutes"),
	}
	if l.minWire.Type == 0 || l.maxWire.Type == 0 {
		return nil, errors.New("the server's hello reply has no wire versions")
	}
	r.maxMessage.Store(l.maxMessage)
	r.limits = l
	return l, nil
}

func okReply() bson.Raw {
	b, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}})
	return b
}

func errorReply(msg string, code int32) bson.Raw {
	d := bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: msg}}
	if code != 0 {
		d = append(d, bson.E{Key: "code", Value: code})
	}
	b, _ := bson.Marshal(d)
	return b
}
