package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// URI is the connection string of a client whose connections come from a
// Dialer: one standalone server, no credentials, no TLS (the address is
// never resolved).
const URI = "mongodb://den-relay/?directConnection=true"

// ErrNodeGone is returned (wrapped) when the node end of the control
// channel is closed.
var ErrNodeGone = errors.New("the node's relay is gone")

// Dialer is a runner's dialer (options.Client().SetDialer): each dial asks
// the node, over the control channel, for a relay connection. Once the
// node is gone (stopped, restarting, upgraded: runners outlive it), it
// serves dials from a relay in this process backed by a client of its own,
// from fallback, so the task goes on; an operation in flight at that
// moment may fail once.
type Dialer struct {
	log      *zap.Logger
	fallback func(context.Context) (*mongo.Client, error)

	mu          sync.Mutex
	ctl         *net.UnixConn // nil once the node is gone
	seq         uint64
	local       *Relay
	localPeer   *Peer
	localClient *mongo.Client
	closed      bool
}

// NewDialer returns a dialer asking the node at the other end of ctl (a
// runner's end of a ControlPair). It owns ctl. fallback connects a client
// straight to MongoDB, for when the node is gone.
func NewDialer(ctl *os.File, fallback func(context.Context) (*mongo.Client, error), log *zap.Logger) (*Dialer, error) {
	if log == nil {
		log = zap.NewNop()
	}
	c, err := net.FileConn(ctl) // a close-on-exec duplicate
	ctl.Close()
	if err != nil {
		return nil, fmt.Errorf("relay control socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("relay control socket is not a unix socket")
	}
	return &Dialer{log: log, fallback: fallback, ctl: uc}, nil
}

// DialContext returns a new connection to the relay; network and address
// are ignored.
func (d *Dialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	c, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{cur: c, d: d}, nil
}

// conn is a connection the runner's driver holds. When the node is gone,
// every connection it served is dead, idle ones in the driver's pool too.
// A request the node never read is sent again on a new connection from
// the dialer (then the local relay): one written to a dead connection
// (the write fails with EPIPE), or one left unread in the node's socket
// when it closed (the read fails with ECONNRESET, which a unix socket
// reports only when the closing side left data unread). Only a request
// the node had read, and perhaps run, when it went away fails (EOF).
type conn struct {
	d      *Dialer
	mu     sync.Mutex
	cur    net.Conn
	closed bool
	// pending is the last request written, until a byte of its reply
	// arrives.
	pending []byte
}

func deadPeer(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func (c *conn) current() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *conn) Write(p []byte) (int, error) {
	cur := c.current()
	n, err := cur.Write(p)
	if err != nil && n == 0 && deadPeer(err) {
		var next net.Conn
		if next, err = c.replace(cur); err == nil {
			n, err = next.Write(p)
		}
	}
	if err == nil {
		c.pending = append(c.pending[:0], p...)
	}
	return n, err
}

func (c *conn) Read(p []byte) (int, error) {
	cur := c.current()
	n, err := cur.Read(p)
	if n == 0 && err != nil && errors.Is(err, syscall.ECONNRESET) && len(c.pending) > 0 {
		next, rerr := c.replace(cur)
		if rerr != nil {
			return n, err
		}
		if _, werr := next.Write(c.pending); werr != nil {
			return n, werr
		}
		n, err = next.Read(p)
	}
	if n > 0 {
		c.pending = c.pending[:0]
	}
	return n, err
}

// replace swaps cur for a new connection from the dialer.
func (c *conn) replace(cur net.Conn) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := c.d.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		next.Close()
		return nil, net.ErrClosed
	}
	c.cur = next
	c.mu.Unlock()
	cur.Close()
	return next, nil
}
func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return c.cur.Close()
}
func (c *conn) LocalAddr() net.Addr                { return c.current().LocalAddr() }
func (c *conn) RemoteAddr() net.Addr               { return c.current().RemoteAddr() }
func (c *conn) SetDeadline(t time.Time) error      { return c.current().SetDeadline(t) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.current().SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.current().SetWriteDeadline(t) }

// dial returns a new connection: from the node, or, once it is gone, from
// the local relay.
func (d *Dialer) dial(ctx context.Context) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("relay dialer closed")
	}
	if d.ctl != nil {
		c, err := d.viaNode(ctx)
		if !errors.Is(err, ErrNodeGone) {
			return c, err
		}
		d.ctl.Close()
		d.ctl = nil
		d.log.Warn("the node's relay is gone (node stopped or restarting); this runner now connects to MongoDB directly", zap.Error(err))
	}
	if d.local == nil {
		client, err := d.fallback(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to MongoDB directly: %w", err)
		}
		d.localClient, d.local = client, New(client, d.log)
		d.localPeer = d.local.NewPeer(d.log)
	}
	conn, theirs, err := connPair()
	if err != nil {
		return nil, err
	}
	d.localPeer.Serve(d.local.ctx, conn)
	f := os.NewFile(uintptr(theirs), "relay-conn")
	defer f.Close()
	return net.FileConn(f)
}

// Direct reports whether the dialer has switched to its own client.
func (d *Dialer) Direct() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctl == nil
}

func (d *Dialer) viaNode(ctx context.Context) (net.Conn, error) {
	d.seq++
	req := seqBytes(d.seq)
	deadline, _ := ctx.Deadline()
	d.ctl.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { d.ctl.SetDeadline(time.Now()) })
	defer stop()
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w (%w)", what, ErrNodeGone, err)
	}
	if _, _, err := d.ctl.WriteMsgUnix(req, nil, nil); err != nil {
		return nil, fail("ask the node for a relay connection", err)
	}
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := d.ctl.ReadMsgUnix(buf, oob)
		if err == nil && n == 0 {
			err = errors.New("control socket closed")
		}
		if err != nil {
			return nil, fail("read the node's answer", err)
		}
		fds := rights(oob[:oobn])
		if n != requestLen || binary.LittleEndian.Uint64(buf) != d.seq {
			// A late answer to a dial that gave up: drop it.
			closeAll(fds)
			continue
		}
		if len(fds) != 1 {
			closeAll(fds)
			return nil, errors.New("the node could not open a relay connection")
		}
		f := os.NewFile(uintptr(fds[0]), "relay-conn")
		defer f.Close()
		return net.FileConn(f)
	}
}

func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Close closes the control channel and, after a switch, the local relay
// and its client. Commands still in flight through the local relay (a
// handshake waiting for a server that does not answer) are cut off when
// ctx ends: the runner is exiting, and its own operations are over.
func (d *Dialer) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.ctl != nil {
		d.ctl.Close()
	}
	if d.local == nil {
		return nil
	}
	stop := context.AfterFunc(ctx, d.local.cmdCancel)
	d.localPeer.Close()
	stop()
	d.local.Close()
	return d.localClient.Disconnect(ctx)
}
