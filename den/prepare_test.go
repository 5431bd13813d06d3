package den_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Test::Prepare burns prepareCPU of CPU in Prepare (plugins.Preparer),
// then writes a file to the directory its configuration names ({"dir":
// ...}); its Run does nothing.
const preparePlugin = "Test::Prepare"

// prepareCPU is what Test::Prepare's Prepare burns: well past what a run
// of a plugin that does nothing costs den's worker (a few tenths of a
// second under -race).
const prepareCPU = 1500 * time.Millisecond

func init() {
	plugins.Register(preparePlugin, preparing{})
}

type preparing struct{}

func (preparing) Run(_ context.Context, _ *queue.Task, env plugins.Env) (int, error) {
	fmt.Fprintln(env.Stdout, "ran")
	return 1, nil
}

func (preparing) Prepare(_ context.Context, config json.RawMessage) {
	var c struct {
		Dir string `json:"dir"`
	}
	if json.Unmarshal(config, &c) != nil || c.Dir == "" {
		return
	}
	burnThreadCPU(prepareCPU)
	f, err := os.CreateTemp(c.Dir, fmt.Sprintf("prepared-%d-", os.Getpid()))
	if err == nil {
		f.Close()
	}
}

// burnThreadCPU spins until this thread has used d of CPU (user and
// system), however loaded the machine.
func burnThreadCPU(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	used := func() time.Duration {
		var ru unix.Rusage
		if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
			return d // cannot tell: stop
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := used()
	for x := 0; used()-start < d; x++ {
		for i := 0; i < 100000; i++ {
			x ^= i
		}
	}
}

// A plugin's preparation (plugins.Preparer: the command plugin's list of
// library programs, made again after a package was installed) is den's
// work, not the task's: the CPU it burns before its run begins is charged
// to no task, neither on a fresh runner's first run nor on a reused
// runner's later one, measured from the process tree and from the run's
// cgroup. (A run of the command plugin was charged 2.6 s for a list made
// again during the suite, when another package's test installed den's
// .deb.)
func TestPreparationIsNotChargedToTheTask(t *testing.T) {
	t.Parallel()
	inEachContainment(t, func(t *testing.T, c containment) {
		db := dentest.DB(t)
		dir := t.TempDir()
		qid := dentest.Queue(t, db, "prepare", preparePlugin, 1, "fifo")
		ids := dentest.Tasks(t, db, qid, bson.D{{Key: "i", Value: 1}}, bson.D{{Key: "i", Value: 2}})
		var sig den.TestSignals
		sig.Init()
		startNode(t, db, "n", func(cfg *den.Config) {
			cfg.Cgroups, cfg.Signals = c.cgroups, &sig
			cfg.PluginConfig[preparePlugin] = json.RawMessage(fmt.Sprintf(`{"dir": %q}`, dir))
		})
		// One queue with one thread: the first task ends first.
		for _, id := range ids {
			if end := sig.TaskEnded.Wait(t, "a task's end"); end.Task != id || end.Status != 1 {
				t.Fatalf("the node reported the end %+v, want task %s with status 1", end, id.Hex())
			}
		}
		rawA, rawB := dentest.Task(t, db, ids[0]), dentest.Task(t, db, ids[1])
		assertReused(t, runnerInfo(t, rawA), runnerInfo(t, rawB))
		prepared, err := filepath.Glob(filepath.Join(dir, "prepared-*"))
		if err != nil || len(prepared) != 2 {
			t.Fatalf("the plugin prepared %d runs (%v), want 2: %v", len(prepared), prepared, err)
		}
		for i, raw := range []bson.Raw{rawA, rawB} {
			u := usageOf(t, fmt.Sprintf("task %d", i+1), raw)
			if cpu := u.CPUUserS + u.CPUSystemS; cpu >= prepareCPU.Seconds()/2 {
				t.Errorf("task %d (a run that does nothing) is charged %.2f s of CPU; its plugin's preparation burnt %.1f s before the run began", i+1, cpu, prepareCPU.Seconds())
			}
		}
	})
}
