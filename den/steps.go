package den

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/runners"
	"github.com/den-project/den/den/internal/sweep"
	"github.com/den-project/den/queue"
)

// A step is one thing the loop does in a full pass (S = fullPass) or the
// housekeeping in a round (S = round): when it is due, and what it does.
// A pass, or a round, walks its list of steps in order (fullPassSteps,
// roundSteps); each step reads what the steps before it left in S.
//
// The steps are walked by one loop, and the housekeeping's by one
// goroutine beside it, rather than run as a goroutine per service (as
// River's or asynq's maintenance services are): for this protocol that is
// better. The claims need the reads before them in the same pass (the
// queues, the node document's limit, what the node holds); an idle node
// must cost the database about 3 commands a second however many queues
// there are, which takes knowing, in one place, what was read when; and
// the housekeeping's writes (rescues, sweeps, retention) share one budget
// a round (chores), which keeps a database full of forged tasks from
// turning one round into hours of writes.
type step[S any] interface {
	// due reports whether the step runs in this pass or round.
	due(s *S) bool
	// do does it; an error ends a full pass (a round goes on with its
	// next step).
	do(ctx context.Context, s *S) error
}

// fullPass is what a full pass's steps read and leave for the steps
// after them.
type fullPass struct {
	// at is when the pass started; first is set when no pass has read
	// what this node holds yet (it does so before it claims).
	at    time.Time
	first bool
	// filter and gfs are the queues this node serves, and its gfs
	// setting, by its configuration and the config collection's.
	filter queueFilter
	gfs    string
	// queues, serve and byID are the queues of the loop's last read of
	// every queue (queueBook), those this node serves, and all by _id.
	queues, serve []queue.Queue
	byID          queue.ByID
	// held is what this node holds, when this pass read it (nil: not).
	held []queue.Task
	// counted is set once every node's running counts were read before
	// the claims.
	counted bool
	// limit is the node document's maxthreads, as the pass wrote it.
	limit queue.NodeLimit
}

// fullPassSteps are the steps of a full pass, in the order it takes them:
// what a claim needs, the claims, then the reads that can wait for them
// (on a server that scans, each read costs a claim seconds), the
// cancellations, and the hand-over to the housekeeping. passes.read
// walks them.
func fullPassSteps(ps *passes, sweeper *sweep.Sweeper) []step[fullPass] {
	return []step[fullPass]{
		syncClock{ps},
		readSharedConfig{ps},
		readQueues{ps},
		readHeld{ps, true},
		countRunning{ps, true},
		writeNodeDocument{ps},
		claims{ps},
		readHeld{ps, false},
		countRunning{ps, false},
		probe{ps},
		cancelHeld{sweeper},
		askLive{ps.pool},
		handOver{ps},
	}
}

// syncClock reads the server's time every ClockEvery: a clock this host's
// monotonic clock counts on drifts a little.
type syncClock struct{ ps *passes }

func (s syncClock) due(p *fullPass) bool { return p.at.Sub(s.ps.clockAt) >= s.ps.params.ClockEvery }

func (s syncClock) do(ctx context.Context, p *fullPass) error {
	if err := s.ps.Store.SyncClock(ctx, s.ps.Clock); err != nil {
		return err
	}
	s.ps.clockAt = p.at
	return nil
}

// readSharedConfig reads the config collection's active document every
// RefreshEvery (and at the first pass), and logs its problems once.
type readSharedConfig struct{ ps *passes }

func (s readSharedConfig) due(p *fullPass) bool {
	return s.ps.shared == nil || p.at.Sub(s.ps.sharedAt) >= s.ps.params.RefreshEvery
}

func (s readSharedConfig) do(ctx context.Context, p *fullPass) error {
	ps := s.ps
	shared, err := ps.Store.ActiveConfig(ctx)
	if err != nil {
		return err // never fall back to serving every queue
	}
	ps.shared, ps.sharedAt = &shared, p.at
	if len(shared.Problems) > 0 {
		if ps.Notes.Set("config", strings.Join(shared.Problems, "; ")) {
			ps.Log.Warn("config collection: bad fields in the active document", zap.Strings("problems", shared.Problems))
		}
	} else if ps.Notes.Clear("config") {
		ps.Log.Info("config collection: active document is valid again")
	}
	return nil
}

// readQueues reads the queues (queueBook), and which of them this node
// serves, every pass.
type readQueues struct{ ps *passes }

func (readQueues) due(*fullPass) bool { return true }

func (s readQueues) do(ctx context.Context, p *fullPass) error {
	ps := s.ps
	p.filter, p.gfs = ps.effective(*ps.shared)
	queues, serve, byID, full, err := ps.readQueues(ctx, p.at, p.filter)
	if err != nil {
		return err
	}
	p.queues, p.serve, p.byID = queues, serve, byID
	ps.health.loop.Mark("queues", ps.Now())
	if full {
		ps.lastQueues.Store(&byID)
	}
	return nil
}

// readHeld reads what this node holds: before the claims at start (the
// tasks of runners that outlived its last run count against its
// limits), after them while the node holds tasks (their cancel flags).
type readHeld struct {
	ps           *passes
	beforeClaims bool
}

func (s readHeld) due(p *fullPass) bool {
	if s.beforeClaims {
		return p.first
	}
	return !p.first && s.ps.held.Any()
}

func (s readHeld) do(ctx context.Context, p *fullPass) error {
	ps := s.ps
	sent := ps.Now()
	held, err := ps.Store.Held(ctx, ps.params.Name, false)
	if err != nil {
		return err
	}
	p.held = held
	ps.held.Read(held, sent, p.byID.Request)
	ps.heldRead = true
	ps.health.loop.Mark("held tasks", ps.Now())
	return nil
}

// countRunning counts every node's claimed and running tasks: before the
// claims while a queue-wide threads limit is in play (or no count was
// made yet), else after them.
type countRunning struct {
	ps           *passes
	beforeClaims bool
}

func (s countRunning) due(p *fullPass) bool {
	if s.beforeClaims {
		return s.ps.claimer.NeedsCount(p.serve)
	}
	return !p.counted
}

func (s countRunning) do(ctx context.Context, p *fullPass) error {
	p.counted = true
	return s.ps.claimer.CountRunning(ctx, p.serve, p.at)
}

// writeNodeDocument writes the node document (the heartbeat), every
// pass, and logs a maxthreads in it den cannot use once.
type writeNodeDocument struct{ ps *passes }

func (writeNodeDocument) due(*fullPass) bool { return true }

func (s writeNodeDocument) do(ctx context.Context, p *fullPass) error {
	ps := s.ps
	limit, problem, err := ps.beat.Write(ctx, p.queues, p.serve, p.at)
	if err != nil {
		return err
	}
	p.limit = limit
	ps.health.loop.Mark("node document", ps.Now())
	if problem != "" {
		if ps.Notes.Set("node-maxthreads", problem) {
			ps.Log.Warn("node document: " + problem)
		}
	} else if ps.Notes.Clear("node-maxthreads") {
		ps.Log.Info("node document: maxthreads is valid again")
	}
	return nil
}

// claims gives the claimer what the pass read, and claims, unless claims
// are paused.
type claims struct{ ps *passes }

func (claims) due(*fullPass) bool { return true }

func (s claims) do(ctx context.Context, p *fullPass) error {
	return s.ps.claimer.ClaimPass(ctx, p.serve, p.limit, p.gfs, p.byID, p.at)
}

// cancelHeld carries out the cancellations of the tasks this node holds
// (the sweeper).
type cancelHeld struct{ sweeper *sweep.Sweeper }

func (cancelHeld) due(*fullPass) bool { return true }

func (s cancelHeld) do(ctx context.Context, p *fullPass) error {
	return s.sweeper.Cancel(ctx, p.held, p.byID)
}

// askLive asks the runners of the held tasks a reader watches for their
// live output, when the pass read what the node holds.
type askLive struct{ pool *runners.Pool }

func (askLive) due(p *fullPass) bool { return p.held != nil }

func (s askLive) do(_ context.Context, p *fullPass) error {
	s.pool.AskLive(p.held, p.at)
	return nil
}

// handOver gives the housekeeping what the pass read (passes.handOver).
type handOver struct{ ps *passes }

func (handOver) due(*fullPass) bool { return true }

func (s handOver) do(_ context.Context, p *fullPass) error {
	ps := s.ps
	b := &ps.book
	ps.handOver(passView{at: p.at, queues: b.full, serve: b.full[:b.served:b.served], byID: b.fullIndex, read: b.fullAt, running: ps.claimer.Running(), measure: ps.claimer.WithWork()})
	return nil
}
