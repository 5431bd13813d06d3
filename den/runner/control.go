package runner

// Environment of the worker.
const (
	envWorker     = "DEN_RUNNER_WORKER"     // "1" in the worker
	envSupervisor = "DEN_RUNNER_SUPERVISOR" // the supervisor's pid and start time, "pid:ms"
	controlFD     = 3
)

// measured is the supervisor's answer to "usage".
type measured struct {
	CPUUser   float64 `json:"cpu_user_s"`
	CPUSystem float64 `json:"cpu_system_s"`
	// PeakRSS is the largest sampled sum of the tree's RSS, in bytes.
	PeakRSS int64 `json:"peak_rss"`
	// MaxRSS is the largest peak RSS of one process the supervisor reaped
	// (ru_maxrss), in bytes.
	MaxRSS int64 `json:"max_rss"`
	// CgroupPeak is the run cgroup's memory.peak in bytes; 0: none.
	CgroupPeak int64 `json:"cgroup_peak,omitempty"`
	Samples    int   `json:"samples"`
	// MemoryKill is set when the supervisor killed the task's processes
	// for passing their memory request (memory.go); OOMKills counts the
	// kernel's OOM kills in the run's cgroup.
	MemoryKill *memoryKill `json:"memory_kill,omitempty"`
	OOMKills   int64       `json:"oom_kills,omitempty"`
	// PeakTaskRSS is the largest sampled RSS of the task's processes (the
	// tree but the worker), in bytes.
	PeakTaskRSS int64 `json:"peak_task_rss,omitempty"`
}

// memoryKill is what the supervisor saw when it stopped a run for its
// memory.
type memoryKill struct {
	RSS   int64 `json:"rss"`   // bytes the task's processes held
	Limit int64 `json:"limit"` // bytes the task requested
	Procs int   `json:"procs"` // processes killed
}
