package relay

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/testdeadline"
)

// A runner that exits with a reply still unread resets its connection:
// the relay's next read gets ECONNRESET. That is a connection ending, not
// an unreadable message, and is not logged as a warning.
func TestResetConnectionIsNoWarning(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	r := New(nil, zap.New(core))
	defer r.Close()
	p := r.NewPeer(nil)
	defer p.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "relay-test")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	served, runner := conn(fds[0]), conn(fds[1])
	p.Serve(r.ctx, served)
	if _, err := runner.Write(buildMsg(t, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}, "")); err != nil {
		t.Fatal(err)
	}
	// The reply is written, and not read: it waits in the runner's socket.
	testdeadline.Wait(t, time.Millisecond, "the reply in the runner's socket", func() bool { return unread(t, runner) > 0 })
	runner.Close()
	// The relay's read gets the reset and the connection ends: what it
	// logs of it, it has logged by then.
	testdeadline.Wait(t, time.Millisecond, "the relay to end the reset connection", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.conns) == 0
	})
	for _, e := range logs.All() {
		t.Errorf("logged %s: %s %v", e.Level, e.Message, e.ContextMap())
	}
}

// unread is how many bytes wait in conn's socket to be read (SIOCINQ).
func unread(t *testing.T, conn net.Conn) int {
	t.Helper()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ioctlErr error
	if err := raw.Control(func(fd uintptr) { n, ioctlErr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if ioctlErr != nil {
		t.Fatalf("SIOCINQ: %v", ioctlErr)
	}
	return n
}
