package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/runner"
)

// Resource usage of a run. The supervisor owns the run's process tree, so
// it measures; the worker asks it ("usage" on the control channel, answered
// by "usage <json>") and writes the numbers into the task.
//
// What is exact and what is sampled:
//   - CPU is exact. A process's CPU time goes, when it is reaped, to the
//     process that reaped it (its cutime/cstime), and every process of the
//     run is reaped inside the run: by its parent, or, once re-parented, by
//     the supervisor (a child subreaper). So the CPU of the run is, at any
//     moment, the sum over the live tree (the worker included) of each
//     process's own and reaped children's time (/proc/PID/stat), plus the
//     supervisor's getrusage(RUSAGE_CHILDREN). At the end, after the
//     leftovers are stopped and reaped, the live tree is the worker alone.
//     With a cgroup, its cpu.stat says the same from the kernel directly
//     and is used instead. (/proc counts in clock ticks: 10 ms.)
//   - Peak RSS is sampled: the sum of the tree's resident memory every
//     sampleEvery (every memoryEvery when the task requests memory), the
//     largest sum kept. A peak between samples is missed,
//     but the result is never below the largest single process's own peak
//     (ru_maxrss of the reaped processes, which the kernel keeps exactly).
//     With a cgroup, memory.peak is the exact peak of the whole run (page
//     cache included) and is reported beside it as peak_memory_mb.
//   - A runner that serves several tasks measures each run from zero: the
//     CPU seconds counted when the run began (the worker's, and what the
//     supervisor reaped in earlier runs) are subtracted, the samples start
//     over, and the run's cgroup is new. The kernel's ru_maxrss cannot be
//     reset: in a later run it counts only when it has grown since the run
//     began (then it is a process of this run).

// sampleEvery is how often the supervisor samples its tree's memory.
const sampleEvery = 2 * time.Second

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// architecture Linux runs Go on.
const clockTicks = 100

// sampler keeps the supervisor's samples of its tree.
type sampler struct {
	me      int32
	worker  int32
	cgroup  string
	peakRSS int64
	samples int
	// taskRSS is the last sample's RSS of the task's processes: the tree
	// but the worker. limit is the task's memory request in bytes (0:
	// none); killed, what enforceMemory saw when it passed it.
	taskRSS  int64
	peakTask int64
	limit    int64
	killed   *runner.MemoryKill
	// base is the CPU already counted when the run began (a runner's
	// later runs): subtracted from what the tree and rusage say;
	// maxRSSBefore is the supervisor's RUSAGE_CHILDREN ru_maxrss then.
	base         cpuTimes
	maxRSSBefore int64
	// tree walks the supervisor's tree (nil: contain.Descendants).
	tree *contain.Tree
}

type cpuTimes struct{ user, system float64 }

// cpu is the CPU the tree and its reaped processes have used in all, in
// seconds, not less base. (It takes a sample: called on a sampler about to
// be replaced, at the begin of a run.)
func (s *sampler) cpu(ctx context.Context) cpuTimes {
	var c cpuTimes
	c.user, c.system = s.sample(ctx)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		c.user += tvSeconds(ru.Utime)
		c.system += tvSeconds(ru.Stime)
	}
	return c
}

// sample adds one sample of the live tree's memory and returns its CPU
// (own and reaped children's) in seconds.
func (s *sampler) sample(ctx context.Context) (user, system float64) {
	return s.sampleOf(s.walker().Descendants(ctx, s.me))
}

// walker is the tree the sampler reads processes through.
func (s *sampler) walker() *contain.Tree {
	if s.tree == nil {
		return contain.NewTree() // keeps nothing
	}
	return s.tree
}

// sampleOf is sample of the tree pids.
func (s *sampler) sampleOf(pids []int32) (user, system float64) {
	var rss, task int64
	page := int64(os.Getpagesize())
	tree := s.walker()
	for _, pid := range pids {
		st, ok := tree.ReadStat(pid)
		if !ok {
			continue
		}
		user += float64(st.UTime+st.CUTime) / clockTicks
		system += float64(st.STime+st.CSTime) / clockTicks
		if pid != s.worker && st.PPID == s.worker && ownBinary(pid) {
			// den's trampoline (memory.go): the worker's memory, or den's
			// sandbox, for the moment it lives; counting it would add a
			// second worker to whichever sample met it.
			continue
		}
		rss += st.RSSPages * page
		if pid != s.worker {
			task += st.RSSPages * page
		}
	}
	s.samples++
	s.peakRSS = max(s.peakRSS, rss)
	s.taskRSS = task
	s.peakTask = max(s.peakTask, task)
	return user, system
}

// measure samples once more and adds what the kernel knows exactly. first
// says the run is its runner's first: only then, or once it has grown
// since the run began, is ru_maxrss its own. alone says the tree is known
// to be the worker alone (a stop has just found nothing else): the sample
// then reads the worker only, without walking the tree again.
func (s *sampler) measure(ctx context.Context, first, alone bool) runner.Measured {
	var user, system float64
	if alone {
		user, system = s.sampleOf([]int32{s.worker})
	} else {
		user, system = s.sample(ctx)
	}
	m := runner.Measured{PeakRSS: s.peakRSS, Samples: s.samples, MemoryKill: s.killed, PeakTaskRSS: s.peakTask}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		user += tvSeconds(ru.Utime)
		system += tvSeconds(ru.Stime)
		if first || ru.Maxrss > s.maxRSSBefore {
			m.MaxRSS = ru.Maxrss * 1024
		}
	}
	m.CPUUser, m.CPUSystem = max(user-s.base.user, 0), max(system-s.base.system, 0)
	if s.cgroup != "" {
		if u, sys, ok := cgroupCPU(s.cgroup); ok {
			m.CPUUser, m.CPUSystem = u, sys
		}
		if b, err := os.ReadFile(filepath.Join(s.cgroup, "memory.peak")); err == nil {
			m.CgroupPeak, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
		m.OOMKills = oomKills(s.cgroup)
	}
	return m
}

// workerCPU is the CPU of the worker and of every process the worker
// and the supervisor reaped, in seconds: the tree's when it is the
// worker alone (between runs).
func (s *sampler) workerCPU() cpuTimes {
	var c cpuTimes
	if st, ok := s.walker().ReadStat(s.worker); ok {
		c.user = float64(st.UTime+st.CUTime) / clockTicks
		c.system = float64(st.STime+st.CSTime) / clockTicks
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		c.user += tvSeconds(ru.Utime)
		c.system += tvSeconds(ru.Stime)
	}
	return c
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// cgroupCPU reads user_usec and system_usec of a cgroup's cpu.stat.
func cgroupCPU(dir string) (user, system float64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, 0, false
	}
	var got int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "user_usec":
			user, got = float64(n)/1e6, got+1
		case "system_usec":
			system, got = float64(n)/1e6, got+1
		}
	}
	return user, system, got == 2
}
