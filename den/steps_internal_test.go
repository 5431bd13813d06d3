package den

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/base"
	"github.com/den-project/den/den/internal/chore"
	"github.com/den-project/den/den/internal/claim"
	"github.com/den-project/den/den/internal/held"
	"github.com/den-project/den/queue"
)

// When each step of a full pass is due, by what the pass and the steps
// before it read.
func TestFullPassStepsAreDueWhenTheirTimeHasCome(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	global := queue.Queue{ID: bson.NewObjectID(), Global: true}
	for _, c := range []struct {
		name string
		step func(ps *passes) step[fullPass]
		// set makes the node's and the pass's state before the step.
		set  func(ps *passes, p *fullPass)
		want bool
	}{
		{"clock synced 59s ago", func(ps *passes) step[fullPass] { return syncClock{ps} },
			func(ps *passes, _ *fullPass) { ps.clockAt = now.Add(-59 * time.Second) }, false},
		{"clock synced a minute ago", func(ps *passes) step[fullPass] { return syncClock{ps} },
			func(ps *passes, _ *fullPass) { ps.clockAt = now.Add(-time.Minute) }, true},
		{"config collection never read", func(ps *passes) step[fullPass] { return readSharedConfig{ps} },
			func(*passes, *fullPass) {}, true},
		{"config collection read 9s ago", func(ps *passes) step[fullPass] { return readSharedConfig{ps} },
			func(ps *passes, _ *fullPass) { ps.shared, ps.sharedAt = &queue.SharedConfig{}, now.Add(-9*time.Second) }, false},
		{"config collection read 10s ago", func(ps *passes) step[fullPass] { return readSharedConfig{ps} },
			func(ps *passes, _ *fullPass) {
				ps.shared, ps.sharedAt = &queue.SharedConfig{}, now.Add(-10*time.Second)
			}, true},
		{"queues: every pass", func(ps *passes) step[fullPass] { return readQueues{ps} },
			func(*passes, *fullPass) {}, true},
		{"held before the claims: the first pass", func(ps *passes) step[fullPass] { return readHeld{ps, true} },
			func(_ *passes, p *fullPass) { p.first = true }, true},
		{"held before the claims: a later pass", func(ps *passes) step[fullPass] { return readHeld{ps, true} },
			func(*passes, *fullPass) {}, false},
		{"held after the claims: the first pass read it before", func(ps *passes) step[fullPass] { return readHeld{ps, false} },
			func(ps *passes, p *fullPass) {
				p.first = true
				ps.held.Claimed(bson.NewObjectID(), global.ID, queue.Resources{})
			}, false},
		{"held after the claims: the node holds nothing", func(ps *passes) step[fullPass] { return readHeld{ps, false} },
			func(*passes, *fullPass) {}, false},
		{"held after the claims: the node holds a task", func(ps *passes) step[fullPass] { return readHeld{ps, false} },
			func(ps *passes, _ *fullPass) { ps.held.Claimed(bson.NewObjectID(), global.ID, queue.Resources{}) }, true},
		{"counts before the claims: never counted", func(ps *passes) step[fullPass] { return countRunning{ps, true} },
			func(*passes, *fullPass) {}, true},
		{"counts after the claims: counted before", func(ps *passes) step[fullPass] { return countRunning{ps, false} },
			func(_ *passes, p *fullPass) { p.counted = true }, false},
		{"counts after the claims: not counted before", func(ps *passes) step[fullPass] { return countRunning{ps, false} },
			func(*passes, *fullPass) {}, true},
		{"probe 0.9s after the last", func(ps *passes) step[fullPass] { return probe{ps} },
			func(ps *passes, _ *fullPass) {
				ps.claimer.ReadPass(nil, nil, "", nil)
				ps.probed.last = now.Add(-900 * time.Millisecond)
			}, false},
		{"probe a pass after the last", func(ps *passes) step[fullPass] { return probe{ps} },
			func(ps *passes, _ *fullPass) {
				ps.claimer.ReadPass(nil, nil, "", nil)
				ps.probed.last = now.Add(-time.Second)
			}, true},
		{"probe before the claims have read the queues", func(ps *passes) step[fullPass] { return probe{ps} },
			func(ps *passes, _ *fullPass) {}, false},
		{"probe while the node is full", func(ps *passes) step[fullPass] { return probe{ps} },
			func(ps *passes, _ *fullPass) { zero := 0; ps.claimer.ReadPass(nil, &zero, "", nil) }, false},
		{"probe put off by its share of the database's time", func(ps *passes) step[fullPass] { return probe{ps} },
			func(ps *passes, _ *fullPass) {
				ps.claimer.ReadPass(nil, nil, "", nil)
				ps.probed.pace.Ran(time.Now().Add(-time.Second)) // a probe that took 1 s
			}, false},
		{"live output: held not read", func(ps *passes) step[fullPass] { return askLive{ps.pool} },
			func(*passes, *fullPass) {}, false},
		{"live output: held read, none", func(ps *passes) step[fullPass] { return askLive{ps.pool} },
			func(_ *passes, p *fullPass) { p.held = []queue.Task{} }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := stepsNode(now)
			p := &fullPass{at: now}
			c.set(ps, p)
			if got := c.step(ps).due(p); got != c.want {
				t.Errorf("due = %v, want %v", got, c.want)
			}
		})
	}
}

// A full pass takes its steps in the order the protocol's costs want:
// what a claim needs, the claims, then what can wait for them.
func TestFullPassStepsOrder(t *testing.T) {
	t.Parallel()
	var got []string
	for _, s := range fullPassSteps(stepsNode(time.Now()), nil) {
		name := fmt.Sprintf("%T", s)
		switch s := s.(type) {
		case readHeld:
			name += fmt.Sprintf("(before claims %v)", s.beforeClaims)
		case countRunning:
			name += fmt.Sprintf("(before claims %v)", s.beforeClaims)
		}
		got = append(got, name)
	}
	want := []string{
		"den.syncClock", "den.readSharedConfig", "den.readQueues",
		"den.readHeld(before claims true)", "den.countRunning(before claims true)",
		"den.writeNodeDocument", "den.claims",
		"den.readHeld(before claims false)", "den.countRunning(before claims false)",
		"den.probe", "den.cancelHeld", "den.askLive", "den.handOver",
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps\n got %v\nwant %v", got, want)
	}
	var names []string
	for _, s := range houseSteps(stepsNode(time.Now()), nil, nil, nil, nil, nil) {
		names = append(names, s.name)
	}
	if want := []string{"counts", "oldest", "rescue", "sweep", "stats", "schedules", "retention"}; !slices.Equal(names, want) {
		t.Errorf("housekeeping steps %v, want %v", names, want)
	}
}

// stepsNode is the passes of a node at now, with the default intervals,
// that has read nothing yet.
func stepsNode(now time.Time) *passes {
	e := &base.Env{Clock: queue.NewClock(func() time.Time { return now })}
	cl := &claim.Claimer{Env: e, Held: held.New()}
	return &passes{
		Env:     e,
		params:  passesParams{ClockEvery: DefaultClockEvery, RefreshEvery: DefaultRefreshEvery, ProbeEvery: DefaultProbeEvery},
		claimer: cl, held: cl.Held, probed: probeState{pace: chore.Pace{Share: probeShare}},
	}
}
