package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The control channel between a node and one runner is a unix
// SOCK_SEQPACKET socketpair, created by the node, one end inherited by the
// runner. Each request is 8 bytes, a sequence number; the answer repeats
// it and carries, in SCM_RIGHTS, one end of a fresh connected socketpair
// whose other end the node serves as a relay connection. Nothing listens
// anywhere, so no other process can reach the relay. The channel carries
// connections only: what a runner tells its node travels on the runner's
// task channel (package den/runner), which exists with the relay or
// without it.
const requestLen = 8

// ControlPair returns a new control channel: the node's end and the end a
// runner inherits. Both are close-on-exec; exec.Cmd's ExtraFiles hands the
// runner's end to one child without the flag.
func ControlPair() (node, runner *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create a relay control socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "relay-control"), os.NewFile(uintptr(fds[1]), "relay-control-runner"), nil
}

// ServeControl serves the runner at the other end of ctl (the node's end
// of a ControlPair) in a goroutine, until the runner closes its end (it
// exited) or the relay is closed: each request gets a new relay
// connection. The runner's sessions end with it. ServeControl owns ctl.
func (r *Relay) ServeControl(ctl *os.File, log *zap.Logger) error {
	c, err := net.FileConn(ctl)
	ctl.Close()
	if err != nil {
		return fmt.Errorf("relay control socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return errors.New("relay control socket is not a unix socket")
	}
	if log == nil {
		log = r.log
	}
	if !r.goServe(func(ctx context.Context) { r.serveControl(ctx, uc, log) }) {
		uc.Close()
		return errors.New("relay closed")
	}
	return nil
}

func (r *Relay) serveControl(ctx context.Context, uc *net.UnixConn, log *zap.Logger) {
	peer := r.NewPeer(log)
	defer peer.Close()
	defer uc.Close()
	stop := context.AfterFunc(ctx, func() { uc.Close() })
	defer stop()
	buf := make([]byte, requestLen+1)
	for {
		n, _, _, _, err := uc.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return // the runner exited, or the relay is closing
		}
		if n != requestLen {
			log.Warn("relay: malformed request on a runner's control socket; closing it", zap.Int("bytes", n))
			return
		}
		conn, theirs, err := connPair()
		if err != nil {
			// Answer without a connection: the runner's dial fails and
			// its driver tries again.
			log.Warn("relay: cannot open a connection for a runner", zap.Error(err))
			if _, _, err := uc.WriteMsgUnix(buf[:requestLen], nil, nil); err != nil {
				return
			}
			continue
		}
		_, _, err = uc.WriteMsgUnix(buf[:requestLen], unix.UnixRights(theirs), nil)
		unix.Close(theirs)
		if err != nil {
			conn.Close()
			return
		}
		peer.Serve(ctx, conn)
	}
}

// connPair returns a connected stream socketpair: one end as a net.Conn,
// the other as a close-on-exec file descriptor.
func connPair() (net.Conn, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "relay-conn")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, -1, fmt.Errorf("socketpair: %w", err)
	}
	return c, fds[1], nil
}

func seqBytes(seq uint64) []byte { return binary.LittleEndian.AppendUint64(nil, seq) }
