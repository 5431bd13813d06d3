package claim

import (
	"cmp"
	"runtime"
	"sync"
	"time"

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
type Capacity struct {
	limits ResourceLimits
	mu     sync.Mutex
	last   []cpu.TimesStat
	// machine is the last look at the machine's memory and cores, taken
	// at most once per machineEvery: a node claims again each time a
	// runner ends, and reading /proc/meminfo and /proc/stat at every claim
	// was a tenth of the node's CPU per task.
	machine    machineLook
	machineAt  time.Time
	machineSet bool
	// meter reads the machine's memory (nil: the host's, readMemory).
	meter memoryMeter
}

// memoryMeter reads a machine's memory: in all and available, in MB (0:
// unknown). Tests give capacity one that counts its reads.
type memoryMeter interface {
	memory() (totalMB, availableMB float64)
}

// hostMemory is the host's memory (/proc/meminfo).
type hostMemory struct{}

func (hostMemory) memory() (totalMB, availableMB float64) { return readMemory() }

// machineEvery is how long a look at the machine serves claims. What a
// claim compares with it moves no faster: a task just claimed has not
// taken its memory yet, and the node's own reservations count at once.
const machineEvery = time.Second

// machineLook is what the machine has: memory in all and available (0:
// unknown), and how many cores were idle since the look before.
type machineLook struct {
	totalMB, availableMB float64
	idle                 float64
	idleOK               bool
}

// look returns the machine's figures, read again when the last look is
// older than machineEvery.
func (c *Capacity) look() machineLook {
	c.mu.Lock()
	if c.machineSet && time.Since(c.machineAt) < machineEvery {
		defer c.mu.Unlock()
		return c.machine
	}
	c.mu.Unlock()
	var m machineLook
	var meter memoryMeter = hostMemory{}
	if c.meter != nil {
		meter = c.meter
	}
	m.totalMB, m.availableMB = meter.memory()
	m.idle, m.idleOK = c.idleCores()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.machine, c.machineAt, c.machineSet = m, time.Now(), true
	return m
}

func (c *Capacity) busyThreshold() float64 {
	if c.limits.BusyCorePercent <= 0 {
		return DefaultBusyCorePercent
	}
	return c.limits.BusyCorePercent
}

// total is the node's limit: configured, else the machine's.
func (c *Capacity) total() queue.Resources {
	t := queue.Resources{MemoryMB: c.limits.MemoryMB, CPUs: c.limits.CPUs}
	if t.MemoryMB <= 0 {
		t.MemoryMB = c.look().totalMB
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
func (c *Capacity) Offer(host *queue.NodeResources, reserved queue.Resources) queue.Resources {
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
func (c *Capacity) free(reserved queue.Resources) queue.Resources {
	free := c.total().Sub(reserved)
	m := c.look()
	if m.availableMB > 0 {
		free.MemoryMB = min(free.MemoryMB, m.availableMB)
	}
	if m.idleOK {
		free.CPUs = min(free.CPUs, m.idle)
	}
	return free
}

// readMemory reads the machine's memory in all and available, in MB; 0
// when it cannot be read.
func readMemory() (totalMB, availableMB float64) {
	vm, err := mem.VirtualMemory()
	if err != nil {
		return 0, 0
	}
	return float64(vm.Total >> 20), float64(vm.Available >> 20)
}

// idleCores counts the cores less busy than the threshold since the last
// look (the first look sees none busy). Called by look only.
func (c *Capacity) idleCores() (float64, bool) {
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
