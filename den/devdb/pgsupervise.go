package devdb

import (
	"context"
	"fmt"
	"time"
)

// A cluster's server that dies (kill -9, a PANIC on a full disk, the
// kernel's OOM killer) is noticed at once, since den is its parent, and
// started again: meanwhile the proxy drops each command's connection
// (the backend is down), as a MongoDB that went away would, so that
// clients see the database unreachable, not failing, and retry. The
// supervisor tells the log when the server died and when it is back,
// and, when it cannot be started for restartFor, gives up: the server
// stops with Server.Err saying why, and den dev and den devdb exit 1.

// pgRestartFor is how long a dead server is started again before den
// gives up: long enough for an operator to free a full disk.
const pgRestartFor = 5 * time.Minute

// pgRestartTell is how long restarting may fail before the log says why
// (at first the old server's processes may still hold its shared
// memory, for a moment).
const pgRestartTell = 2 * time.Second

// isDown reports whether the server died and is not back yet.
func (c *cluster) isDown() bool { return c.down.Load() }

// supervise restarts the server whenever it exits until stop is called,
// or until it cannot be restarted (then failed is closed).
func (c *cluster) supervise() {
	defer close(c.supervised)
	for {
		p := c.current()
		select {
		case <-c.life.Done():
			return
		case <-p.exited:
		}
		if c.life.Err() != nil {
			return
		}
		c.down.Store(true)
		died := time.Now()
		fmt.Fprintf(c.log, "devdb: PostgreSQL (pid %d) exited (%v); restarting it. Its log: %s\n", p.pid, p.err, lastLines(readFile(c.logf), 3))
		err := c.restart(died)
		if err == nil && c.restarted != nil {
			if err = c.restarted(); err != nil {
				err = fmt.Errorf("devdb: PostgreSQL restarted, but what serves it could not start again: %w", err)
			}
		}
		if err != nil {
			if c.life.Err() == nil {
				c.err = err
				fmt.Fprintln(c.log, err)
				close(c.failed)
			}
			return
		}
		c.down.Store(false)
		fmt.Fprintf(c.log, "devdb: PostgreSQL restarted (pid %d), %s after it exited\n", c.current().pid, time.Since(died).Round(time.Millisecond))
	}
}

// restart starts the server again, trying with a growing pause (up to 5
// s) until it answers, stop is called, or restartFor has passed since it
// died.
func (c *cluster) restart(died time.Time) error {
	pause := 100 * time.Millisecond
	told := false
	for {
		err := c.tryStart()
		if err == nil {
			return nil
		}
		if c.life.Err() != nil {
			return c.life.Err()
		}
		if time.Since(died)+pause > c.restartFor {
			return fmt.Errorf("devdb: PostgreSQL exited and could not be started again within %s: %w", c.restartFor, err)
		}
		if !told && time.Since(died) > pgRestartTell {
			fmt.Fprintf(c.log, "devdb: PostgreSQL does not start again (%v); den keeps trying for %s\n", err, c.restartFor)
			told = true
		}
		select {
		case <-c.life.Done():
			return c.life.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// tryStart starts the server once and waits until it answers; a server
// that does not is stopped.
func (c *cluster) tryStart() error {
	settlePidFile(c.dir)
	if err := c.launch(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.life, 30*time.Second)
	defer cancel()
	if err := c.waitReady(ctx, 30*time.Second, false); err != nil {
		c.current().halt()
		return err
	}
	return nil
}
