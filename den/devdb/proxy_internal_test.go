package devdb

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/testdeadline"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/wire"
)

// heldUpstream is a server that answers each command only when the test
// lets it: arrived receives the database of each command as it arrives,
// and a command is answered once release is called for its database.
// overlap records a command that arrived while another of its database
// was unanswered.
type heldUpstream struct {
	ln      net.Listener
	arrived chan string

	mu       sync.Mutex
	inFlight map[string]int
	release  map[string]chan struct{}
	overlap  []string
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &heldUpstream{ln: ln, arrived: make(chan string, 16), inFlight: map[string]int{}, release: map[string]chan struct{}{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

// gate is the channel a command of db waits on.
func (u *heldUpstream) gate(db string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.release[db] == nil {
		u.release[db] = make(chan struct{}, 16)
	}
	return u.release[db]
}

// let answers one command of db.
func (u *heldUpstream) let(db string) { u.gate(db) <- struct{}{} }

func (u *heldUpstream) serve(c net.Conn) {
	defer c.Close()
	for {
		req, err := wire.Read(c)
		if err != nil {
			return
		}
		db := wire.Database(req)
		u.mu.Lock()
		if u.inFlight[db] > 0 {
			u.overlap = append(u.overlap, db)
		}
		u.inFlight[db]++
		u.mu.Unlock()
		u.arrived <- db
		<-u.gate(db)
		u.mu.Lock()
		u.inFlight[db]--
		u.mu.Unlock()
		if _, err := c.Write(reply(req)); err != nil {
			return
		}
	}
}

// reply is an OP_MSG {ok: 1} answering req.
func reply(req []byte) []byte {
	doc, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}})
	msg := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(doc))
	binary.LittleEndian.PutUint32(msg[8:], binary.LittleEndian.Uint32(req[4:])) // responseTo: the request's id
	binary.LittleEndian.PutUint32(msg[12:], wire.OpMsg)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// command is an OP_MSG update (a write, which takes its database's lock)
// on database db.
func command(t *testing.T, id uint32, db string) []byte {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: "update", Value: "tasks"}, {Key: "$db", Value: db}})
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(doc))
	binary.LittleEndian.PutUint32(msg[4:], id)
	binary.LittleEndian.PutUint32(msg[12:], wire.OpMsg)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// The proxy runs one write at a time in each database, and commands of
// other databases beside it: a command of database b reaches the server
// while one of a is unanswered; a second command of a waits for the
// first's answer. Red with one lock for every database (b's command never
// arrives while a's is held) and without the per-database lock (a's second
// command does not wait for it).
func TestProxyRunsOneCommandAtATimePerDatabase(t *testing.T) {
	up := newHeldUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := newProxy(ln, "tcp", up.ln.Addr().String())
	served := make(chan struct{})
	go func() { defer close(served); p.serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })

	// Each command on a connection of its own, as a driver's pool sends
	// concurrent commands; answers are read in the background.
	answered := make(chan string, 8)
	send := func(id uint32, db string) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(command(t, id, db)); err != nil {
			t.Fatal(err)
		}
		go func() {
			if _, err := wire.Read(c); err == nil {
				answered <- db
			}
		}()
	}
	wait := func(ch chan string, want string) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("got a command of %q, want %q", got, want)
			}
		case <-testdeadline.GiveUp():
			t.Fatalf("no command of %q by the test's deadline", want)
		}
	}
	// users is how many commands of db hold or wait for its lock.
	users := func(db string) int {
		p.locks.mu.Lock()
		defer p.locks.mu.Unlock()
		if d := p.locks.dbs[db]; d != nil {
			return d.users
		}
		return 0
	}

	send(1, "a")
	wait(up.arrived, "a")
	send(2, "b")
	wait(up.arrived, "b") // beside a's, unanswered
	send(3, "a")
	// The second command of a is read and waits for a's lock: the
	// signal is the lock's count of its users, not a time; its arrival
	// at the server instead is the failure.
	if !testdeadline.Until(time.Millisecond, func() bool {
		select {
		case db := <-up.arrived:
			t.Fatalf("a command of %q reached the server while one of a was unanswered", db)
		default:
		}
		return users("a") == 2
	}) {
		t.Fatalf("the second command of a does not wait for a's lock (%d users)", users("a"))
	}
	up.let("b")
	wait(answered, "b")
	up.let("a")
	wait(answered, "a")
	wait(up.arrived, "a") // the second, once the first was answered
	up.let("a")
	wait(answered, "a")
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.overlap) > 0 {
		t.Errorf("commands of %v reached the server while another of their database was unanswered", up.overlap)
	}
	if users("a") != 0 || users("b") != 0 {
		t.Errorf("the locks of answered databases are kept: a %d, b %d users", users("a"), users("b"))
	}
}
