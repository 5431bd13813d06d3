package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
//     moment, the sum over the tree (the worker included) of each
//     process's own and reaped children's time (/proc/PID/stat), plus the
//     supervisor's getrusage(RUSAGE_CHILDREN). The tree's exited processes
//     that are not yet reaped (zombies) count: their time reaches their
//     parent's only when it reaps them. A reading during which a process
//     of the tree was reaped is read again (treeCPU). At the end, after the
//     leftovers are stopped and reaped, the tree is the worker alone.
//     With a cgroup, its cpu.stat says the same from the kernel directly
//     and is used instead. (/proc counts in clock ticks: 10 ms.)
//   - Peak RSS is sampled: the sum of the tree's resident memory every
//     sampleEvery (every memoryEvery when the task requests memory), the
//     largest sum kept. A peak between samples is missed,
//     but the result is never below the largest single process's own peak
//     (ru_maxrss of the reaped processes, which the kernel keeps exactly).
//     With a cgroup, memory.peak is the exact peak of the whole run (page
//     cache included) and is reported beside it as peak_memory_mb.
//   - Each run is measured from its begin, the worker's request to begin
//     it: the CPU seconds counted then (the worker's start and its
//     plugin's preparation, plugins.Preparer, for a runner's first run;
//     the earlier runs and what the supervisor reaped in them for a later
//     one; with a cgroup, what the first run's cgroup counted) are
//     subtracted. A later run's samples also start over, and its cgroup
//     is new. The kernel's ru_maxrss cannot be
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
	// base is the CPU already counted when the run began: subtracted
	// from what the tree and rusage say, or, with a cgroup, from its
	// cpu.stat (cgroupBase: what the first run's cgroup, which the worker
	// started in, counted when the run began); maxRSSBefore is the
	// supervisor's RUSAGE_CHILDREN ru_maxrss then.
	base, cgroupBase cpuTimes
	maxRSSBefore     int64
	// tree walks the supervisor's tree (nil: contain.Descendants).
	tree *contain.Tree
}

type cpuTimes struct{ user, system float64 }

// cpu is the CPU the tree and its reaped processes have used in all, in
// seconds, not less base. (It takes a sample: called on a sampler about to
// be replaced, at the begin of a run.)
func (s *sampler) cpu(ctx context.Context) cpuTimes {
	c := s.treeCPU(ctx)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		c.user += tvSeconds(ru.Utime)
		c.system += tvSeconds(ru.Stime)
	}
	return c
}

// startNow makes the first run's measure start now rather than when the
// worker started (later runs get a sampler of their own, made as they
// begin): what the worker did until its run began (starting, connecting,
// its plugin's preparation) is not the task's.
func (s *sampler) startNow(ctx context.Context) {
	if s.cgroup != "" {
		if u, sys, ok := cgroupCPU(s.cgroup); ok {
			s.cgroupBase = cpuTimes{u, sys}
		}
		s.base = s.workerCPU()
		return
	}
	s.base = s.cpu(ctx)
}

// sample adds one sample of the tree's memory.
func (s *sampler) sample(ctx context.Context) {
	s.record(s.read(s.walker().Unreaped(ctx, s.me)))
}

// cpuTries is how many times treeCPU reads the tree before it takes a
// reading during which the tree changed.
const cpuTries = 10

// treeCPU adds one sample of the tree's memory and returns the CPU of the
// tree's processes, exited ones not yet reaped included (their own and
// their reaped children's), in seconds.
//
// A process's CPU moves into its parent's when the parent reaps it. The
// tree is read one process at a time, so a reap between two reads loses
// the child's CPU (the parent read before, the child gone after) or counts
// it twice (the other order), and a process re-parented during the walk
// may be missed. So the tree is listed again after the reads, and the
// reading is taken only when every listed process was read and the list
// is the same: then no process of it was reaped or moved while it was
// read. A tree that keeps changing (a run forking programs all the time)
// is read cpuTries times, and the last reading taken: at a run's begin and
// end, where the CPU is subtracted and recorded, the tree is still.
func (s *sampler) treeCPU(ctx context.Context) cpuTimes {
	tree := s.walker()
	r := steadyReading(ctx, func() []int32 { return tree.Unreaped(ctx, s.me) }, s.read)
	s.record(r)
	return r.cpu
}

// steadyReading reads the processes list gives until a reading has read
// them all and list gives the same processes after it, at most cpuTries
// times (or until ctx ends); it returns the last reading.
func steadyReading(ctx context.Context, list func() []int32, read func([]int32) reading) reading {
	pids := list()
	for try := 1; ; try++ {
		r := read(pids)
		again := list()
		if (r.whole && sameProcs(pids, again)) || try == cpuTries || ctx.Err() != nil {
			return r
		}
		pids = again
	}
}

// sameProcs reports whether a and b list the same processes.
func sameProcs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// walker is the tree the sampler reads processes through.
func (s *sampler) walker() *contain.Tree {
	if s.tree == nil {
		return contain.NewTree() // keeps nothing
	}
	return s.tree
}

// reading is what one read of the tree's processes found: their CPU (own
// and reaped children's) in seconds, their resident memory (rss), that of
// the task's processes (task: the tree but the worker); whole when every
// process listed could be read (none was reaped meanwhile).
type reading struct {
	cpu       cpuTimes
	rss, task int64
	whole     bool
}

// read reads the processes pids (a zombie holds no memory, and its CPU
// counts).
func (s *sampler) read(pids []int32) reading {
	r := reading{whole: true}
	page := int64(os.Getpagesize())
	tree := s.walker()
	for _, pid := range pids {
		st, ok := tree.ReadStat(pid)
		if !ok {
			r.whole = false
			continue
		}
		r.cpu.user += float64(st.UTime+st.CUTime) / clockTicks
		r.cpu.system += float64(st.STime+st.CSTime) / clockTicks
		if pid != s.worker && st.PPID == s.worker && ownBinary(pid) {
			// den's trampoline (memory.go): the worker's memory, or den's
			// sandbox, for the moment it lives; counting it would add a
			// second worker to whichever sample met it.
			continue
		}
		r.rss += st.RSSPages * page
		if pid != s.worker {
			r.task += st.RSSPages * page
		}
	}
	return r
}

// record keeps a reading's memory as a sample.
func (s *sampler) record(r reading) {
	s.samples++
	s.peakRSS = max(s.peakRSS, r.rss)
	s.taskRSS = r.task
	s.peakTask = max(s.peakTask, r.task)
}

// measure samples once more and adds what the kernel knows exactly. first
// says the run is its runner's first: only then, or once it has grown
// since the run began, is ru_maxrss its own. alone says the tree is known
// to be the worker alone (a stop has just found nothing else): the sample
// then reads the worker only, without walking the tree again.
func (s *sampler) measure(ctx context.Context, first, alone bool) runner.Measured {
	var c cpuTimes
	if alone {
		r := s.read([]int32{s.worker})
		s.record(r)
		c = r.cpu
	} else {
		c = s.treeCPU(ctx)
	}
	user, system := c.user, c.system
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
			m.CPUUser, m.CPUSystem = max(u-s.cgroupBase.user, 0), max(sys-s.cgroupBase.system, 0)
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
