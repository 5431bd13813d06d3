package den

import (
	"cmp"
	"runtime"
	"sync"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/den-project/den/queue"
)

// ResourceLimits are what a node may give its tasks' requested_resources.
// Zero memory or cores means what the machine has.
type ResourceLimits struct {
	MemoryMB float64
	CPUs     float64
	// BusyCorePercent: a core busier than this (since the last look) is
	// not counted as free. 100 or more: utilisation is not looked at.
	// Zero means the default, 60.
	BusyCorePercent float64
}

// DefaultBusyCorePercent is the default threshold.
const DefaultBusyCorePercent = 60

// capacity tells how much of its resources a node has free for tasks that
// request some: its limit (configured, else the machine's), minus what its
// own claimed and running tasks requested, and never more than the machine
// has free now (available memory, cores under the busy threshold). A task
// using more than it requested thus shows in what the machine has free; a
// task using less keeps its request reserved.
type capacity struct {
	limits ResourceLimits
	mu     sync.Mutex
	last   []cpu.TimesStat
}

func (c *capacity) busyThreshold() float64 {
	if c.limits.BusyCorePercent <= 0 {
		return DefaultBusyCorePercent
	}
	return c.limits.BusyCorePercent
}

// total is the node's limit: configured, else the machine's.
func (c *capacity) total() queue.Resources {
	t := queue.Resources{MemoryMB: c.limits.MemoryMB, CPUs: c.limits.CPUs}
	if t.MemoryMB <= 0 {
		if vm, err := mem.VirtualMemory(); err == nil {
			t.MemoryMB = float64(vm.Total >> 20)
		}
	}
	if t.CPUs <= 0 {
		t.CPUs = float64(runtime.NumCPU())
	}
	return t
}

// offer is the most a claim of this node could ever give one request
// (resources.offer in its node document), from host, the node's last
// sample of the machine: its limit (configured, else the machine's), but
// no more memory than the machine has available plus what the node's own
// tasks hold reserved, which would come back as they end. The claim
// compares requests with what is available, never with the machine's
// total, so a request the size of the total would otherwise be offered
// and never fit. Cores are offered as the limit: how busy they are
// changes from one second to the next.
func (c *capacity) offer(host *queue.NodeResources, reserved queue.Resources) queue.Resources {
	o := queue.Resources{MemoryMB: c.limits.MemoryMB, CPUs: c.limits.CPUs}
	if o.MemoryMB <= 0 && host != nil && host.MemoryTotalMB > 0 {
		o.MemoryMB = float64(host.MemoryTotalMB)
	}
	if o.MemoryMB <= 0 || o.CPUs <= 0 { // not configured, and not sampled
		t := c.total()
		o.MemoryMB, o.CPUs = cmp.Or(o.MemoryMB, t.MemoryMB), cmp.Or(o.CPUs, t.CPUs)
	}
	if host != nil && host.MemoryAvailableMB > 0 {
		o.MemoryMB = min(o.MemoryMB, float64(host.MemoryAvailableMB)+reserved.MemoryMB)
	}
	return o
}

// free is what is left for new tasks when reserved is requested by the
// node's tasks already.
func (c *capacity) free(reserved queue.Resources) queue.Resources {
	free := c.total().Sub(reserved)
	if vm, err := mem.VirtualMemory(); err == nil {
		free.MemoryMB = min(free.MemoryMB, float64(vm.Available>>20))
	}
	if idle, ok := c.idleCores(); ok {
		free.CPUs = min(free.CPUs, idle)
	}
	return free
}

// idleCores counts the cores less busy than the threshold since the last
// look (the first look sees none busy).
func (c *capacity) idleCores() (float64, bool) {
	if c.busyThreshold() >= 100 {
		return 0, false
	}
	now, err := cpu.Times(true)
	if err != nil || len(now) == 0 {
		return 0, false
	}
	c.mu.Lock()
	last := c.last
	c.last = now
	c.mu.Unlock()
	if len(last) != len(now) {
		return float64(len(now)), true
	}
	idle := 0
	for i := range now {
		busy := (cpuTotal(now[i]) - now[i].Idle - now[i].Iowait) - (cpuTotal(last[i]) - last[i].Idle - last[i].Iowait)
		all := cpuTotal(now[i]) - cpuTotal(last[i])
		if all <= 0 || 100*busy/all < c.busyThreshold() {
			idle++
		}
	}
	return float64(idle), true
}

// cpuTotal is the seconds a core has spent in all its states: the sum that
// gopsutil's TimesStat.Total (deprecated, for gopsutil's own use) makes.
func cpuTotal(t cpu.TimesStat) float64 {
	return t.User + t.System + t.Idle + t.Nice + t.Iowait + t.Irq +
		t.Softirq + t.Steal + t.Guest + t.GuestNice
}
