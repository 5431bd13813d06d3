package den_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/plugins/command"
)

// runOf returns the pid and token of the runner recorded in a task.
func runOf(t *testing.T, what string, raw bson.Raw) (int, string) {
	t.Helper()
	r, ok := raw.Lookup("runner").DocumentOK()
	if !ok {
		t.Fatalf("%s has no runner: %s", what, raw)
	}
	pid, _ := r.Lookup("pid").AsInt64OK()
	token, _ := r.Lookup("token").ObjectIDOK()
	return int(pid), token.Hex()
}

// A runner serves the tasks of its queue one after another, and each is a
// run of its own: a new token and marker, nothing left of the run before
// it (its leftover, in a session of its own and deaf to SIGTERM, is
// stopped before its result is recorded), usage measured from zero. The
// worker's own environment carries no run marker, and an idle runner
// proves no run.
func TestRunnerReuse(t *testing.T) {
	t.Parallel()
	inEachContainment(t, func(t *testing.T, c containment) {
		db := dentest.DB(t)
		qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
		dir := t.TempDir()
		leftover := filepath.Join(dir, "leftover")
		// The first task burns about three seconds of CPU, more than
		// the worker's own share of a short run on a loaded machine
		// (up to 2.9 s seen in CI under -race), so that a second
		// task's usage that went on from the first's is told apart
		// from its own.
		const burnSome = burn
		ids := dentest.Tasks(t, db, qid,
			bson.D{{Key: "shell", Value: `echo "$DEN_RUN"; ` + burnSome + `; setsid sh -c 'trap "" TERM; echo $$ > ` + leftover + `; while :; do sleep 1; done' & while [ ! -s ` + leftover + ` ]; do sleep 0.05; done`}},
			bson.D{{Key: "shell", Value: `echo "$DEN_RUN"; if kill -0 "$(cat ` + leftover + `)" 2>/dev/null; then echo ALIVE; else echo GONE; fi`}},
			bson.D{{Key: "shell", Value: `echo "$DEN_RUN"`}},
		)
		startNode(t, db, "n", func(cfg *den.Config) { cfg.Cgroups = c.cgroups })
		var docs []bson.Raw
		for _, id := range ids {
			docs = append(docs, dentest.WaitStatus(t, db, id, 1))
		}
		pid0, _ := runOf(t, "first task", docs[0])
		tokens := map[string]bool{}
		for i, raw := range docs {
			pid, token := runOf(t, fmt.Sprintf("task %d", i), raw)
			if pid != pid0 {
				t.Errorf("task %d ran in runner %d, the first in %d: not reused", i, pid, pid0)
			}
			if tokens[token] {
				t.Errorf("task %d has the run token of an earlier task: %s", i, token)
			}
			tokens[token] = true
			first, _, _ := strings.Cut(raw.Lookup("stdout").StringValue(), "\n")
			if want := contain.Marker(ids[i].Hex(), token); first != want {
				t.Errorf("task %d's program saw DEN_RUN=%q, want %q", i, first, want)
			}
		}
		if n, _ := docs[0].Lookup("leftover_processes").AsInt64OK(); n < 1 {
			t.Errorf("first task: leftover_processes %v, want its leftover stopped", docs[0].Lookup("leftover_processes"))
		}
		if out := docs[1].Lookup("stdout").StringValue(); !strings.Contains(out, "GONE") {
			t.Errorf("the first task's leftover was alive when the next task of its runner ran: %q", out)
		}
		u0, u1 := usageOf(t, "first task", docs[0]), usageOf(t, "second task", docs[1])
		if u0.CPUUserS+u0.CPUSystemS < 0.2 {
			t.Errorf("first task burnt CPU but its usage says %+v", u0)
		}
		if u1.CPUUserS+u1.CPUSystemS >= u0.CPUUserS+u0.CPUSystemS {
			t.Errorf("second task's usage %+v includes the first's (%+v)", u1, u0)
		}
		// Idle now (runner.idle is 10s): the worker's environment has no
		// run marker, and the runner proves no run.
		if !liveProcess(pid0) {
			t.Fatalf("runner %d exited at once; it should wait for more tasks", pid0)
		}
		w := workerOf(t, pid0)
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", w))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(env), "DEN_RUN=") {
			t.Errorf("the worker's environment carries a run marker")
		}
		var marker string
		var held bool
		if !dentest.Until(50*time.Millisecond, func() bool {
			marker, held = contain.ProvenRun(pid0)
			return held && marker == ""
		}) {
			t.Fatalf("idle runner proves %q (held %v), want no run", marker, held)
		}
	})
}

// A runner is retired after runner.max_tasks tasks and after runner.idle
// without one; runner.max_tasks 1 starts a runner per task.
func TestRunnerRetires(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		maxTasks int
		want     []int // the runner of each task, by order of first use
	}{
		{2, []int{0, 0, 1, 1, 2}},
		{1, []int{0, 1, 2, 3, 4}},
	} {
		t.Run(fmt.Sprintf("max_tasks=%d", c.maxTasks), func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			qid := dentest.Queue(t, db, "sleep", sleepPlugin, 1, "fifo")
			ids := dentest.Tasks(t, db, qid, sleepTasks(5, 0)...)
			startNode(t, db, "n", func(cfg *den.Config) {
				cfg.Runner.MaxTasks, cfg.Runner.Idle = c.maxTasks, 500*time.Millisecond
			})
			seen := map[int]int{}
			var last int
			for i, id := range ids {
				pid, _ := runOf(t, fmt.Sprintf("task %d", i), dentest.WaitStatus(t, db, id, 1))
				if _, ok := seen[pid]; !ok {
					seen[pid] = len(seen)
				}
				if got := seen[pid]; got != c.want[i] {
					t.Errorf("task %d ran in runner #%d, want #%d", i, got, c.want[i])
				}
				last = pid
			}
			dentest.Eventually(t, 30*time.Second, fmt.Sprintf("runner %d to exit after its last task (runner.idle is 0.5s)", last), func() bool { return !liveProcess(last) })
		})
	}
}

// A task cancelled while it runs in a reused runner is stopped (-5), and
// the runner goes on to serve the next task.
func TestCancelInReusedRunner(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "cmd", command.Name, 1, "fifo", bson.E{Key: "max_termination_time", Value: 1})
	ids := dentest.Tasks(t, db, qid,
		bson.D{{Key: "shell", Value: `echo one`}},
		bson.D{{Key: "shell", Value: `echo started; sleep 300`}},
	)
	startNode(t, db, "n")
	pid0, _ := runOf(t, "first task", dentest.WaitStatus(t, db, ids[0], 1))
	raw := dentest.WaitStatus(t, db, ids[1], 0)
	if pid, _ := runOf(t, "second task", raw); pid != pid0 {
		t.Fatalf("second task runs in runner %d, the first ran in %d: not reused", pid, pid0)
	}
	cancelTask(t, db, ids[1])
	dentest.WaitStatus(t, db, ids[1], -5)
	third := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: `echo three`}})[0]
	if pid, _ := runOf(t, "third task", dentest.WaitStatus(t, db, third, 1)); pid != pid0 {
		t.Errorf("third task ran in runner %d, want the same runner %d after a cancel", pid, pid0)
	}
}

func cancelTask(t *testing.T, db *mongo.Database, id bson.ObjectID) {
	t.Helper()
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancel", Value: true}}}})
}
