package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// The gate lets perClient reads of an address and overall reads in all
// run at once; a read beyond waits, and is refused once it has waited
// its time: 429 for its address's reads, 503 for everyone's. A read
// whose client leaves while it waits is let go. Addresses are forgotten
// once their reads have ended.
func TestReadGate(t *testing.T) {
	t.Parallel()
	g := NewReadGate("reads", 2, 3, 50*time.Millisecond)
	from := func(addr string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr + ":1234"
		return r
	}
	enter := func(addr string) (func(), error) { return g.Enter(from(addr)) }
	a1, err1 := enter("10.0.0.1")
	a2, err2 := enter("10.0.0.1")
	if err1 != nil || err2 != nil {
		t.Fatalf("the first two reads of an address: %v, %v", err1, err2)
	}
	var busy *BusyError
	if _, err := enter("10.0.0.1"); !errors.As(err, &busy) || !busy.PerClient || busy.Status() != http.StatusTooManyRequests {
		t.Errorf("a third read of the address: %v, want a 429 for its address", err)
	}
	b1, err := enter("10.0.0.2")
	if err != nil {
		t.Fatalf("another address's first read: %v", err)
	}
	if _, err := enter("10.0.0.3"); !errors.As(err, &busy) || busy.PerClient || busy.Status() != http.StatusServiceUnavailable {
		t.Errorf("a fourth read in all: %v, want a 503 for everyone's", err)
	}
	// One ends: the waiting read gets its place.
	got := make(chan error, 1)
	go func() {
		release, err := g.Enter(from("10.0.0.3"))
		if err == nil {
			release()
		}
		got <- err
	}()
	a1()
	if err := <-got; err != nil && !errors.As(err, &busy) {
		t.Errorf("a read waiting for a place that is given back: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Enter(from("10.0.0.4").WithContext(ctx)); err == nil {
		t.Error("a read whose client left got a place")
	}
	a2()
	b1()
	if n := g.clientCount(); n != 0 {
		t.Errorf("%d addresses remembered after every read ended, want 0", n)
	}
	if _, err := enter("10.0.0.1"); err != nil {
		t.Errorf("a read once the others ended: %v", err)
	}
}

// DBFailureOf tells a client that left from a database that is slow or
// down, whatever error the driver gave for the canceled read.
func TestDBFailureOf(t *testing.T) {
	t.Parallel()
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	late, cancel2 := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel2()
	network := mongo.CommandError{Message: "connection closed", Labels: []string{"NetworkError"}}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want DBFailure
	}{
		{"the client left, the driver says network error", gone, fmt.Errorf("read: %w", network), DBAbandoned},
		{"the client left while a server was chosen", gone, topology.ServerSelectionError{Wrapped: context.Canceled}, DBAbandoned},
		{"the request's deadline passed", late, fmt.Errorf("read: %w", context.DeadlineExceeded), DBSlow},
		{"the server's maxTimeMS passed", live, mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired"}, DBSlow},
		{"no server within the deadline", late, topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}, DBDown},
		{"the connection failed", live, network, DBDown},
		{"a filter the server refuses", live, mongo.CommandError{Code: 2, Name: "BadValue"}, DBRefused},
		{"not the database's error", live, errors.New("template"), DBRefused},
	} {
		if got := DBFailureOf(c.ctx, c.err); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
