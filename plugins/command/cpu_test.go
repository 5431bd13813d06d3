package command_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/sandbox"
)

// A task spreads its work over four busy processes for 3 s (the report
// ran fifty: load 12 on 2 cores), under command.cpu 0.05: in the cpu
// cgroup of its own that its program starts in, and no process of it can
// leave, the kernel gives them a twentieth of a core together (its CFS
// quota, read by the node while the task runs, is 5000 µs every 100000
// µs), with 15% and 20 ms of slack. A task that requests more
// (requested_resources.cpus) gets its request as its quota; with
// command.cpu 0 a task is in no cpu cgroup of den's. Where den has no cpu
// cgroup for tasks, nothing bounds a task's CPU
// (TestCPULimitWithoutCgroupIsIdle in den/sandbox tries what holds
// there).
func TestTaskCPUBounded(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	root, err := sandbox.CPUCgroups()
	if err != nil {
		t.Skipf("no cpu cgroup for tasks here, so nothing bounds a task's CPU: %v", err)
	}
	policy, helper := reachPolicy(t)
	for _, tc := range []struct {
		name  string
		cores float64
		extra []bson.E
		// quota is the task's CFS quota in µs every 100000 µs, and the
		// cores its processes may use; "" and 0: it has no cpu cgroup.
		quota string
		bound float64
	}{
		{"command.cpu", 0.05, nil, "5000", 0.05},
		{"a larger request", 0.05, []bson.E{{Key: "requested_resources", Value: bson.D{{Key: "cpus", Value: 0.1}}}}, "10000", 0.1},
		{"no limit", 0, nil, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gate := hostDir(t)
			if err := os.Chmod(gate, 0o777); err != nil {
				t.Fatal(err)
			}
			named, goOn := filepath.Join(gate, "cgroup"), filepath.Join(gate, "go")
			p := asTaskUser(policy)
			p.CPU = tc.cores
			done := make(chan bson.Raw, 1)
			go func() {
				done <- runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "cpucgroup:" + named, "waitfor:" + goOn, "spin:4:3000"}}}, tc.extra...)
			}()
			var raw bson.Raw
			dentest.Eventually(t, 10*time.Second, "the task names its cpu cgroup", func() bool {
				select {
				case raw = <-done:
					return true
				default:
				}
				_, err := os.Stat(named)
				return err == nil
			})
			if raw != nil {
				t.Fatalf("the task ended before it named its cgroup: stdout %q, stderr %q", text(t, raw, "stdout"), text(t, raw, "stderr"))
			}
			name, _ := os.ReadFile(named)
			quota, _ := os.ReadFile(filepath.Join(root, string(name), "cpu.cfs_quota_us"))
			period, _ := os.ReadFile(filepath.Join(root, string(name), "cpu.cfs_period_us"))
			if err := os.WriteFile(goOn, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			raw = <-done
			stdout := text(t, raw, "stdout")
			var cpuMS, wallMS int
			if _, err := fmt.Sscanf(stdout[strings.Index(stdout, "spin: "):], "spin: 4 processes used %d ms of CPU in %d ms\n", &cpuMS, &wallMS); err != nil {
				t.Fatalf("stdout %q (%v), stderr %q", stdout, err, text(t, raw, "stderr"))
			}
			cpu, wall := time.Duration(cpuMS)*time.Millisecond, time.Duration(wallMS)*time.Millisecond
			t.Logf("four busy processes in cgroup %q (CFS quota %q every %q µs): %v of CPU in %v (%.3f cores)", name, quota, period, cpu, wall, cpu.Seconds()/wall.Seconds())
			switch {
			case tc.quota == "" && strings.HasPrefix(string(name), "den-task-"):
				t.Errorf("with no limit, the task is in cpu cgroup %s", name)
			case tc.quota != "" && (strings.TrimSpace(string(quota)) != tc.quota || strings.TrimSpace(string(period)) != "100000"):
				t.Errorf("the task's cpu cgroup %q has CFS quota %q every %q µs, want %s every 100000", name, quota, period, tc.quota)
			}
			if bound := time.Duration(tc.bound*1.15*float64(wall)) + 20*time.Millisecond; tc.bound > 0 && cpu > bound {
				t.Errorf("the task's processes used %v of CPU in %v; want at most %v (%g cores)", cpu, wall, bound, tc.bound)
			}
		})
	}
}
