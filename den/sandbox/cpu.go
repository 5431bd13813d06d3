package sandbox

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/contain"
)

// A task's CPU limit (Spec.CPU, in cores) holds by a cgroup of its own in
// the node's cgroup v1 cpu hierarchy, where den may create one there
// (taskcgroup.go): NewCPUCgroup makes it with a CFS bandwidth quota of
// that many cores per period (cpu.cfs_quota_us over cpu.cfs_period_us:
// 1.5 cores are 150000 µs every 100000 µs, cgroup v2's cpu.max "150000
// 100000"), and the kernel throttles the task's processes, all of them
// together, once they have used it in a period.
//
// Nothing else bounds CPU time without killing (RLIMIT_CPU kills). Where
// there is no cpu cgroup for tasks, the program runs under SCHED_IDLE
// with RLIMIT_NICE 0, which it and all it starts inherit and cannot
// leave without CAP_SYS_NICE: it gets a core only when no other process
// of its CPU group (den, the machine's other work) wants it, and on an
// idle machine all of them. That is a priority, not a bound, and where
// the kernel's autogroup applies (a node in the root cpu cgroup with
// kernel.sched_autogroup_enabled), each session competes as one group
// whatever its threads' policies, and a task may start sessions.

// cfsPeriod is the CFS bandwidth period den gives tasks' cgroups, in
// microseconds (the kernel's default); cfsMinQuota is the kernel's
// smallest quota.
const (
	cfsPeriod   = 100000
	cfsMinQuota = 1000
)

// cpuQuota is the CFS quota, in microseconds per cfsPeriod, of cores.
func cpuQuota(cores float64) int64 {
	return max(cfsMinQuota, int64(math.Round(cores*cfsPeriod)))
}

var cpuRoot = v1Root{detect: contain.DetectCPUV1}

// CPUCgroups returns the directory of this process's cgroup v1 cpu
// cgroup, under which NewCPUCgroup makes tasks' cgroups, or why there is
// none. It looks once per process.
func CPUCgroups() (string, error) { return cpuRoot.get() }

// NewCPUCgroup makes a cgroup for one program whose processes together
// get at most cores CPUs, for Spec.CPUCgroup (NewTaskCgroups makes it
// with the task's memory cgroup). It fails where there is no cpu cgroup
// for tasks (CPUCgroups): Spec.CPU alone then sets SCHED_IDLE.
func NewCPUCgroup(cores float64) (string, error) {
	root, err := CPUCgroups()
	if err != nil {
		return "", err
	}
	return newTaskCgroup(root, "cpu", func(dir string) error { return setCPUQuota(dir, cores) })
}

// setCPUQuota sets the CFS bandwidth of the cgroup dir to cores, or to
// its ancestors' where that is less: cgroup v1 refuses (EINVAL) a quota
// above an ancestor's (a node in a container with a CPU limit), and the
// task could not use more anyway.
func setCPUQuota(dir string, cores float64) error {
	set := func(file string, v int64) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0)
	}
	if err := set("cpu.cfs_period_us", cfsPeriod); err != nil {
		return fmt.Errorf("set the task's CPU period: %w", err)
	}
	quota := min(cpuQuota(cores), ancestorsQuota(filepath.Dir(dir)))
	if err := set("cpu.cfs_quota_us", quota); err != nil {
		return fmt.Errorf("set the task's CPU quota of %g cores: %w", cores, err)
	}
	return nil
}

// ancestorsQuota is the smallest CFS bandwidth of dir and the cgroups
// above it in its hierarchy, as a quota every cfsPeriod; MaxInt64 where
// none has one.
func ancestorsQuota(dir string) int64 {
	least := int64(math.MaxInt64)
	for ; ; dir = filepath.Dir(dir) {
		quota, err1 := readCount(filepath.Join(dir, "cpu.cfs_quota_us"))
		period, err2 := readCount(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil {
			return least // above the hierarchy's root
		}
		if quota > 0 && period > 0 {
			least = min(least, quota*cfsPeriod/period)
		}
		if dir == filepath.Dir(dir) {
			return least
		}
	}
}

// readCount reads a cgroup file holding one number.
func readCount(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// limitCPU puts this process, about to become the program or start it,
// under the task's CPU limit: into the cgroup Spec.CPUCgroup (the calling
// thread alone, for an init), unless it is the memory cgroup it joined
// already; else, with a limit, under SCHED_IDLE.
func limitCPU(spec Spec, thread bool) error {
	switch {
	case spec.CPUCgroup != "" && spec.CPUCgroup == spec.MemoryCgroup:
		return nil
	case spec.CPUCgroup != "":
		if err := joinCgroup(spec.CPUCgroup, thread); err != nil {
			return fmt.Errorf("join the task's cpu cgroup %s: %w", spec.CPUCgroup, err)
		}
	case spec.CPU > 0:
		return idle()
	}
	return nil
}

// schedIdle is SCHED_IDLE (linux/sched.h).
const schedIdle = 5

// idle puts the calling thread, which executes the program or forks it,
// under SCHED_IDLE, and this process under RLIMIT_NICE 0, so that neither
// the program nor what it starts can leave SCHED_IDLE or raise their
// priority (without CAP_SYS_NICE, which a task never has).
func idle() error {
	if err := unix.Setrlimit(unix.RLIMIT_NICE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("set RLIMIT_NICE to 0: %w", err)
	}
	var param [1]int32 // struct sched_param: its priority, 0
	if _, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, schedIdle, uintptr(unsafe.Pointer(&param[0]))); errno != 0 {
		return fmt.Errorf("set SCHED_IDLE: %w", errno)
	}
	return nil
}
