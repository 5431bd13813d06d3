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
	time.Sleep(200 * time.Millisecond) // the reply is written, and not read
	runner.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && logs.Len() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range logs.All() {
		t.Errorf("logged %s: %s %v", e.Level, e.Message, e.ContextMap())
	}
}
