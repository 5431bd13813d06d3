package den_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
)

// A node started with descriptors open and not close-on-exec (here 9 and
// 251, as a shell's redirections or a process supervisor leave them) hands
// none of them to a task's program: through node, runner supervisor,
// worker and sandbox, the program has stdin, stdout and stderr only.
func TestTaskGetsNoInheritedDescriptors(t *testing.T) {
	t.Parallel()
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
	raw := waitFor(t, db, id, 1)
	if got := strings.Fields(raw.Lookup("stdout").StringValue()); strings.Join(got, " ") != "0 1 2" {
		t.Fatalf("the task's program has descriptors %v open, want 0 1 2 only (stderr %q)", got, raw.Lookup("stderr"))
	}
}
