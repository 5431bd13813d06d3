package runners

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v4/process"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// This file tells whose a runner recorded in a task is, and whether it
// still runs that task: on this host or another, this node process's own
// runner, and the proof a runner of the task gives of itself.

// onThisHost reports whether a runner runs on this machine: only then can
// the node signal it or tell whether it is alive.
func (rs *Pool) OnThisHost(r queue.RunnerInfo) bool {
	host, _ := os.Hostname()
	return r.Host == host
}

// alive reports whether the runner process may still exist: a process with
// its pid exists, is not a zombie, and started when the runner did (a pid
// reused by another process does not count). When the start time could not
// be recorded, an existing process counts as alive: a false "dead" would
// run the task twice.
func Alive(r queue.RunnerInfo) bool {
	if r.PID <= 1 || r.PID > math.MaxInt32 {
		return false
	}
	p, err := process.NewProcess(int32(r.PID))
	if err != nil {
		return false
	}
	if st, err := p.Status(); err == nil && len(st) > 0 && st[0] == process.Zombie {
		return false
	}
	if r.Started == 0 {
		return true
	}
	created, err := p.CreateTime()
	if err != nil {
		return true
	}
	diff := created - r.Started
	return diff > -1000 && diff < 1000
}

// startedHere reports whether pid is a runner this node process started and
// has not reaped: it is alive, and the pid cannot have been reused, so its
// recorded start time need not be compared (a process's apparent start
// time can move by a second or more with the boot time the kernel reports
// or a clock step, and a reused runner lives for many tasks).
func (rs *Pool) StartedHere(pid int) bool {
	rs.procs.mu.Lock()
	defer rs.procs.mu.Unlock()
	return rs.procs.byPID[pid] != nil
}

// runGoing reports whether the live runner r may still be running run r
// of task id: a runner serves several tasks, and one whose run ended
// without its result recorded (its final write gave up) goes on to the
// next. (The caller leaves alone, for a minute, a task whose runner has
// just said it is done: the read showing it running may predate that.) A runner of this node process runs what the pool says; any other
// runner what its proof says (one without a proof, its one task).
// (Rescues are conditional on the run's token: a run that has just
// recorded its result is left as it is.)
func (rs *Pool) RunGoing(id bson.ObjectID, r queue.RunnerInfo) bool {
	rs.procs.mu.Lock()
	p := rs.procs.byPID[r.PID]
	at := p != nil && p.task == id
	rs.procs.mu.Unlock()
	if p != nil {
		return at
	}
	proves, held := contain.ProvesRun(r.PID, id.Hex(), r.Token.Hex())
	return proves || !held
}

// isRunnerOf reports whether pid r.PID is, provably, the task runner of
// task id: alive as recorded, the leader of its own process group, started
// as a den runner, and running that very run of id now: its supervisor
// holds the run's proof (contain.HoldProof), with the task id and the
// run's token. A runner of a den that predates proofs proves its one task
// by its spec. Anyone who can write to tasks can write a runner field;
// only a process that passes this check is ever signalled.
func isRunnerOf(r queue.RunnerInfo, id bson.ObjectID) bool {
	if !Alive(r) || r.Started == 0 {
		return false
	}
	if pgid, err := syscall.Getpgid(r.PID); err != nil || pgid != r.PID {
		return false
	}
	p, err := process.NewProcess(int32(r.PID))
	if err != nil {
		return false
	}
	env, err := p.Environ()
	if err != nil {
		return false
	}
	var spec runner.Spec
	specFound := false
	for _, e := range env {
		if raw, ok := strings.CutPrefix(e, runner.SpecEnv+"="); ok {
			specFound = json.Unmarshal([]byte(raw), &spec) == nil
		}
	}
	reusable := spec.Reuse
	if !specFound {
		return false
	}
	if proves, held := contain.ProvesRun(r.PID, id.Hex(), r.Token.Hex()); held {
		return proves
	}
	// No proof: a runner started to serve one task (by a den before
	// proofs, or where the kernel has no memfd) proves it by its spec; one
	// started to serve several proves nothing.
	return !reusable && spec.Task == id.Hex()
}

// staleSign reports whether runner r has given no sign of life (a beat,
// else its start) for longer than after. A sign further in the future than
// after is no sign: no runner wrote it (a writer put a far date there), and
// taking it at its word would let one document hold a slot for ever.
func StaleSign(r queue.RunnerInfo, now time.Time, after time.Duration) bool {
	age := now.Sub(r.LastSign())
	return age > after || age < -after
}
