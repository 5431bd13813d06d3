package den_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// A node started with descriptors open and not close-on-exec (here 9 and
// 251, as a shell's redirections or a process supervisor leave them) hands
// none of them to a task's program: through node, runner supervisor,
// worker and sandbox, the program has stdin, stdout and stderr only.
func TestTaskGetsNoInheritedDescriptors(t *testing.T) {
	t.Parallel()
	dentest.EndToEnd(t)
	db := dentest.DB(t)
	secret, err := os.Create(filepath.Join(t.TempDir(), "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	extra := make([]*os.File, 252-3) // fds 3..251; nil entries are closed in the node
	extra[9-3], extra[251-3] = secret, secret
	exe, _ := os.Executable()
	node := exec.Command(exe)
	node.Env = append(os.Environ(),
		dentest.EnvRole+"=node", envNodeURI+"="+dentest.URI(), envNodeDB+"="+db.Name(), envNodeName+"=n",
		envNodeRunLog+"="+filepath.Join(t.TempDir(), "runners.log"))
	node.ExtraFiles = extra
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Process.Kill(); node.Wait() })
	// The node has them (the test would prove nothing otherwise).
	for _, fd := range []string{"9", "251"} {
		if target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(node.Process.Pid), "fd", fd)); err != nil || target != secret.Name() {
			t.Fatalf("the node's fd %s is %q (%v), not the test's file", fd, target, err)
		}
	}
	qid := dentest.Queue(t, db, "fds", command.Name, 1, "fifo")
	// $$ is the shell the sandbox executed: the task's program itself (ls
	// would list its own directory descriptor too).
	id := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: "ls /proc/$$/fd"}})[0]
	raw := dentest.WaitStatus(t, db, id, 1)
	if got := strings.Fields(raw.Lookup("stdout").StringValue()); strings.Join(got, " ") != "0 1 2" {
		t.Fatalf("the task's program has descriptors %v open, want 0 1 2 only (stderr %q)", got, raw.Lookup("stderr"))
	}
}

// A task whose program forks far past its queue's max_processes sees fork
// fail at the limit: the program and all it started never hold more than
// max_processes processes. den's own runner is not counted (its threads
// never compete with the task's), the node goes on claiming, a task of
// another queue that forks while the first is at its limit runs, and the
// next run of the same queue gets a limit of its own.
func TestTaskProcessLimit(t *testing.T) {
	t.Parallel()
	if _, err := contain.DetectPidsV1(); err != nil {
		t.Skipf("no cgroup v1 pids hierarchy that this process may create cgroups in, so pids.max cannot be checked here (RLIMIT_NPROC is, in den/sandbox): %v", err)
	}
	db := dentest.DB(t)
	dir := t.TempDir()
	const limit = 20
	bomb := dentest.Queue(t, db, "bomb", command.Name, 1, "fifo", bson.E{Key: queue.FieldMaxProcesses, Value: limit})
	other := dentest.Queue(t, db, "other", command.Name, 1, "fifo")
	// The EXIT trap writes with a builtin: the shell can fork no more.
	script := fmt.Sprintf(`trap ': > %[1]s/full' EXIT
i=0; while [ $i -lt 200 ]; do sleep 60 & echo $! >> %[1]s/pids; i=$((i+1)); done`, dir)
	ids := dentest.Tasks(t, db, bomb, bson.D{{Key: "shell", Value: script}}, bson.D{{Key: "shell", Value: "sleep 0; echo again"}})
	neighbour := dentest.Tasks(t, db, other, bson.D{{Key: "shell", Value: fmt.Sprintf("while [ ! -e %s/full ]; do sleep 0.1; done; echo ok", dir)}})[0]
	startNode(t, db, "n")
	var raw bson.Raw
	dentest.Eventually(t, 2*time.Minute, "the bomb's task ends", func() bool {
		raw = dentest.Task(t, db, ids[0])
		st, _ := raw.Lookup("status").AsInt64OK()
		return st > 0
	})
	started := readPids(t, filepath.Join(dir, "pids"))
	if len(started) != limit-1 {
		t.Errorf("the program started %d processes; with itself, %d, want max_processes (%d)", len(started), len(started)+1, limit)
	}
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || !strings.Contains(raw.Lookup("stderr").StringValue(), "Cannot fork") {
		t.Errorf("the bomb's task: status %d, stderr %s; want 2 and the shell's fork failure", st, raw.Lookup("stderr"))
	}
	for _, c := range []struct {
		id  bson.ObjectID
		out string
	}{{neighbour, "ok\n"}, {ids[1], "again\n"}} {
		raw := dentest.WaitStatus(t, db, c.id, 1)
		if out := raw.Lookup("stdout").StringValue(); out != c.out {
			t.Errorf("task %s: stdout %q, want %q", c.id.Hex(), out, c.out)
		}
	}
}

// A task whose queue sets no max_processes runs its program in a pids
// cgroup of its run at the node's runner.max_processes: the supervisor
// makes it when the run begins, and the worker asks nothing more. Two
// tasks of one runner get one each.
func TestTaskProcessLimitIsTheNodesByDefault(t *testing.T) {
	t.Parallel()
	if _, err := contain.DetectPidsV1(); err != nil {
		t.Skipf("no cgroup v1 pids hierarchy that this process may create cgroups in, so pids.max cannot be checked here (RLIMIT_NPROC is, in den/sandbox): %v", err)
	}
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "plain", command.Name, 1, "fifo")
	// The pids hierarchy's mount, and this program's cgroup in it.
	script := `m=$(awk '$9 == "cgroup" && $NF ~ /(^|,)pids(,|$)/ {print $5; exit}' /proc/self/mountinfo)
c=$(awk -F: '$2 ~ /(^|,)pids(,|$)/ {print $3; exit}' /proc/self/cgroup)
echo "$c $(cat "$m$c/pids.max")"`
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "shell", Value: script}}, bson.D{{Key: "shell", Value: script}})
	startNode(t, db, "n", func(c *den.Config) { c.Runner.MaxProcesses = 77 })
	for _, id := range ids {
		raw := dentest.WaitStatus(t, db, id, 1)
		out := strings.Fields(raw.Lookup("stdout").StringValue())
		token := raw.Lookup("runner", "token").ObjectID().Hex()
		if len(out) != 2 || !strings.HasSuffix(out[0], "/den-run-"+id.Hex()+"-"+token) || out[1] != "77" {
			t.Errorf("task %s: the program says %q (stderr %s); want its run's pids cgroup (den-run-%s-%s) with pids.max 77", id.Hex(), out, raw.Lookup("stderr"), id.Hex(), token)
		}
	}
}
