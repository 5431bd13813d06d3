package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
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
// and its client.
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
	d.localPeer.Close()
	d.local.Close()
	return d.localClient.Disconnect(ctx)
}
