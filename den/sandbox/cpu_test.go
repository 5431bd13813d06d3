package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// busyLoops is a shell script that runs four busy loops for three
// seconds, then stops them, waits for them, and says how much CPU time
// they took (times: the shell's, then its children's).
const busyLoops = `p=; for i in 1 2 3 4; do (while :; do :; done) & p="$p $!"; done; sleep 3; kill $p; wait; times`

// childrenCPU reads the CPU time of the shell's children from times's
// output (user and system time, each as 1m2.5s).
func childrenCPU(t *testing.T, out string) time.Duration {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	m := regexp.MustCompile(`(\d+)m([\d.]+)s`).FindAllStringSubmatch(lines[len(lines)-1], -1)
	if len(lines) != 2 || len(m) != 2 {
		t.Fatalf("times said %q", out)
	}
	var d time.Duration
	for _, x := range m {
		min, _ := strconv.Atoi(x[1])
		sec, _ := strconv.ParseFloat(x[2], 64)
		d += time.Duration(min)*time.Minute + time.Duration(sec*float64(time.Second))
	}
	return d
}

// A program that runs four busy loops for 3 s under a limit of a
// twentieth of a core gets that, whether the sandbox becomes the program
// or stays as its init: in its cpu cgroup the kernel throttles it
// (cpu.stat's nr_throttled counts the periods it did). The loops' CPU
// time over the wall time of the run is at most a twentieth of a core,
// with 15% and 20 ms of slack.
func TestCPULimit(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	if _, err := CPUCgroups(); err != nil {
		t.Skipf("no cpu cgroup for tasks here: %v", err)
	}
	const cores = 0.05
	for _, init := range []bool{false, true} {
		t.Run(fmt.Sprintf("init %v", init), func(t *testing.T) {
			t.Parallel()
			cg, err := NewTaskCgroups(0, cores)
			if err != nil || cg.CPU == "" {
				t.Fatalf("no cpu cgroup made: %+v, %v", cg, err)
			}
			defer cg.Remove()
			spec := Spec{Path: "/bin/sh", Args: []string{"sh", "-c", busyLoops}, MountNS: init, PIDNS: init, CPU: cores, CPUCgroup: cg.CPU}
			cmd, err := Command(spec, []string{"PATH=/usr/bin:/bin"})
			if err != nil {
				t.Fatal(err)
			}
			cmd.Dir = "/"
			start := time.Now()
			out, err := cmd.CombinedOutput()
			wall := time.Since(start)
			if err != nil {
				t.Fatalf("the program: %v, %q", err, out)
			}
			used := childrenCPU(t, string(out))
			bound := time.Duration(cores*1.15*float64(wall)) + 20*time.Millisecond
			throttled := cpuStat(t, cg.CPU, "nr_throttled")
			t.Logf("four busy loops under %g cores: %v of CPU in %v (%.3f cores), throttled in %d periods", cores, used.Round(time.Millisecond), wall.Round(time.Millisecond), used.Seconds()/wall.Seconds(), throttled)
			if used > bound {
				t.Errorf("the busy loops used %v of CPU in %v; want at most %v (%g cores)", used, wall, bound, cores)
			}
			if throttled == 0 {
				t.Errorf("the kernel never throttled the program in its cpu cgroup")
			}
		})
	}
}

// cpuStat reads one count of a cgroup's cpu.stat.
func cpuStat(t *testing.T, dir, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("cpu.stat has no %s: %q", key, b)
	return 0
}

// Where there is no cpu cgroup for a task, its CPU limit bounds nothing,
// but the program runs under SCHED_IDLE, and neither it nor what it
// starts can leave it (the program's user has no CAP_SYS_NICE, and
// RLIMIT_NICE is 0): chrt's attempt to go back to SCHED_OTHER fails. As
// root, which may, the program runs as nobody, as tasks do.
func TestCPULimitWithoutCgroupIsIdle(t *testing.T) {
	t.Parallel()
	needNamespaces(t)
	if !HasCaps(CapsUser) {
		t.Skipf("this test process lacks %s", CapsUser)
	}
	if _, err := exec.LookPath("chrt"); err != nil {
		t.Skipf("no chrt here (util-linux): %v", err)
	}
	script := `chrt -p $$; chrt -o -p 0 $$ 2>&1 || echo refused; sh -c 'chrt -p $$'`
	for _, init := range []bool{false, true} {
		t.Run(fmt.Sprintf("init %v", init), func(t *testing.T) {
			t.Parallel()
			spec := Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, MountNS: init, PIDNS: init, CPU: 0.5,
				User: &Credential{Uid: 65534, Gid: 65534}}
			cmd, err := Command(spec, []string{"PATH=/usr/bin:/bin"})
			if err != nil {
				t.Fatal(err)
			}
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the program: %v, %s", err, out)
			}
			s := string(out)
			if strings.Count(s, "policy: SCHED_IDLE") != 2 || !strings.Contains(s, "Operation not permitted\nrefused\n") {
				t.Fatalf("the program and its child said:\n%s\nwant SCHED_IDLE twice, and chrt -o refused", s)
			}
		})
	}
}

// Under a cgroup with a smaller CPU quota than a task's (a node in a
// container limited to a fiftieth of a core, here with a period of its
// own), the task's cgroup gets that quota, not an error: cgroup v1
// refuses a quota above an ancestor's, and the task could not use more.
func TestCPUQuotaUnderAnAncestors(t *testing.T) {
	t.Parallel()
	root, err := CPUCgroups()
	if err != nil {
		t.Skipf("no cpu cgroup for tasks here: %v", err)
	}
	parent, err := os.MkdirTemp(root, "den-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(parent) })
	for file, v := range map[string]string{"cpu.cfs_period_us": "200000", "cpu.cfs_quota_us": "4000"} {
		if err := os.WriteFile(filepath.Join(parent, file), []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(parent, "task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := setCPUQuota(dir, 1.5); err != nil {
		t.Fatalf("1.5 cores under a fiftieth: %v", err)
	}
	if q, err := readCount(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil || q != 2000 {
		t.Fatalf("the task's quota is %d (%v), want 2000 every 100000 µs", q, err)
	}
}
