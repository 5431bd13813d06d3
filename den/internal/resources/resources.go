package resources

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/den-project/den/queue"
)

// DefaultEvery is how often a Sampler samples by default.
const DefaultEvery = 5 * time.Second

// Sampler samples the host at most every Every.
type Sampler struct {
	// Path is where free disk space is measured. Default: the working
	// directory (where runners and the programs of tasks start unless they
	// are told otherwise), else the temporary directory.
	Path string
	// Every is the least time between samples. Default DefaultEvery.
	Every time.Duration

	mu   sync.Mutex
	last *queue.NodeResources
	cpus int
}

// Sample returns the host's resources: a new sample when the last is older
// than Every (or there is none), else the last one. A part gopsutil cannot
// read on this system is left zero; err says what failed, and the sample
// is still usable.
func (s *Sampler) Sample(ctx context.Context, now time.Time) (*queue.NodeResources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	every := s.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if s.last != nil && now.Sub(s.last.At) < every && !now.Before(s.last.At) {
		return s.last, nil
	}
	if s.Path == "" {
		if wd, err := os.Getwd(); err == nil {
			s.Path = wd
		} else {
			s.Path = os.TempDir()
		}
	}
	r := &queue.NodeResources{DiskPath: s.Path, At: now, Load: []float64{0, 0, 0}}
	var first error
	fail := func(what string, err error) {
		if first == nil {
			first = fmt.Errorf("sample host resources: %s: %w", what, err)
		}
	}
	if s.cpus == 0 {
		n, err := cpu.CountsWithContext(ctx, true)
		if err != nil {
			fail("cpus", err)
		}
		s.cpus = n
	}
	r.CPUs = s.cpus
	if avg, err := load.AvgWithContext(ctx); err != nil {
		fail("load", err)
	} else {
		r.Load = []float64{avg.Load1, avg.Load5, avg.Load15}
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		fail("memory", err)
	} else {
		r.MemoryTotalMB, r.MemoryAvailableMB = int64(vm.Total>>20), int64(vm.Available>>20)
	}
	if du, err := disk.UsageWithContext(ctx, s.Path); err != nil {
		fail("disk "+s.Path, err)
	} else {
		r.DiskFreeMB = int64(du.Free >> 20)
	}
	s.last = r
	return r, first
}
