package devdb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// FerretDB keeps what it learned of each database's collections (their
// PostgreSQL tables) in memory, and never reads it again. den dev's
// PostgreSQL commits without waiting for the disk (postgres.go): a crash
// loses the last fraction of a second of commits, and a collection made
// in it (its table and its row in FerretDB's metadata table) is lost
// with them while FerretDB still believes in it. Every command on it
// then failed with "relation does not exist" until den was restarted
// (den dev stuck after kill -9 of its PostgreSQL right after a first
// insert). So, whenever the supervisor has started PostgreSQL again, den
// runs FerretDB anew, on the same socket, before it lets commands
// through: the new FerretDB reads the collections from what PostgreSQL
// has after its recovery. The old one's connections are closed; the
// proxy closes its clients' connections with them, and drivers connect
// again, as after any outage.

// ferret runs the embedded FerretDB of a server: one instance at a time,
// run anew by renew.
type ferret struct {
	cfg *ferretdb.Config

	mu     sync.Mutex
	life   context.Context    // the server's: every instance ends with it
	cancel context.CancelFunc // ends the current instance; nil before start
	done   chan struct{}      // closed when the current instance has stopped
}

// newFerret is the runner of FerretDB instances of cfg; none runs until
// start.
func newFerret(cfg *ferretdb.Config) *ferret { return &ferret{cfg: cfg} }

// start makes an instance and runs it until ctx is done, stop or renew is
// called.
func (f *ferret) start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.life = ctx
	return f.run()
}

// run makes an instance and runs it; f.mu is held.
func (f *ferret) run() error {
	// A socket file left by an instance that did not remove it makes
	// the new listener fail with "address already in use".
	if err := os.Remove(f.cfg.Listener.Unix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("devdb: remove FerretDB's old socket: %w", err)
	}
	db, err := newFerretDB(f.cfg)
	if err != nil {
		return fmt.Errorf("devdb: start FerretDB: %w", err)
	}
	ctx, cancel := context.WithCancel(f.life)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Run(ctx)
	}()
	f.cancel, f.done = cancel, done
	return nil
}

// renew stops the running instance and runs a new one: what the old one
// kept in memory is forgotten. Before start, it does nothing (start will
// make a new one anyway).
func (f *ferret) renew() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil || f.life.Err() != nil {
		return nil
	}
	f.cancel()
	<-f.done
	return f.run()
}

// stop stops the running instance and waits until it has (its
// connections closed, its PostgreSQL pool too).
func (f *ferret) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil {
		return
	}
	f.cancel()
	<-f.done
	f.cancel = nil
}
