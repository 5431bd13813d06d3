package command_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// A task allocates 3 GiB and touches every page, with the node's default
// command.memory_mb (2 GiB): it is stopped (it ran to its end before). In
// a memory cgroup of the task's own, the kernel's OOM killer kills it and
// den says so in stderr; where den may not make one, RLIMIT_DATA fails its
// allocation (TestMemoryLimit in den/sandbox tries both). A task that
// requests more memory (requested_resources.memory_mb) than
// command.memory_mb gets its request.
func TestTaskMemoryBounded(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	policy, helper := reachPolicy(t)
	p := asTaskUser(policy)
	p.MemoryMB, p.TmpMB = command.DefaultMemoryMB, command.DefaultTmpMB
	raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "alloc:3221225472"}}})
	stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 || strings.Contains(stdout, ": ok") {
		t.Fatalf("3 GiB under a 2 GiB limit: status %d, stdout %q, stderr %q", st, stdout, stderr)
	}
	if _, err := sandbox.MemoryCgroups(); err == nil && (raw.Lookup("signal").StringValue() != "SIGKILL" || !strings.Contains(stderr, "den: the kernel killed 1 process(es) of the task for passing its memory limit (2048 MiB")) {
		t.Errorf("in its memory cgroup: signal %v, stderr %q; want the OOM killer's SIGKILL, said", raw.Lookup("signal"), stderr)
	}
	t.Logf("3 GiB under a 2 GiB limit: stdout %q, stderr %q", stdout, stderr)

	// 384 MiB: over a limit of 256, under a request of 512.
	p.MemoryMB = 256
	raw = runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "alloc:402653184"}}}, bson.E{Key: "requested_resources", Value: bson.D{{Key: "memory_mb", Value: 512}}})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "alloc:402653184: ok\n" {
		t.Errorf("384 MiB with 512 requested: status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
	raw = runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "alloc:402653184"}}})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 {
		t.Errorf("384 MiB with none requested: status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
}
