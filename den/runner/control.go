package runner

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// The control channel between a runner's two processes. The supervisor
// starts the worker with one end of a stream socketpair as its file
// descriptor ControlFD (and its own pid and start time in EnvSupervisor,
// which the worker checks against its parent). The worker asks, the
// supervisor answers: one request per line, a verb and at most one
// argument, separated by a space; an answer is a line that starts with its
// verb. The worker asks one batch of questions at a time, in one write, and
// takes each answer off the channel before it asks the next batch
// (the worker's link.askAll), so answers need no numbering; requests
// without an answer wait for the next batch (link.tell, flush). The supervisor answers the
// requests of one read in order, in one write. A run at the node's
// defaults makes three exchanges: "begin"; "stop" with "usage"; and "idle"
// once recorded. "grace", "memory" and "procs" are sent, together, only
// for a task whose grace, memory request or process limit is its own.
// Requests:
//
//	begin <task id>  a run of that task starts, with
//	                 a pids cgroup at the node's
//	                 process limit                   -> run <token> <dir> | run <token> - | refused <why>
//	grace <ms>       the task's max_termination_time,
//	                 for a worker that dies          (no answer)
//	memory <bytes>   the task's memory request, which
//	                 the supervisor enforces         (no answer)
//	procs <n>        the run's process limit, when
//	                 not the node's                  -> procs <dir> | procs -
//	usage            the run's usage so far          -> usage <JSON measured>
//	stop <ms>        stop every other process of the
//	                 run, with this grace            -> stopped <n>
//	idle             the run is over and recorded    -> idle <n>
//
// "procs -" and "run <token> -" mean the supervisor has no pids cgroup
// for the run (RLIMIT_NPROC holds its limit); "idle <n>" counts the run's
// processes still there (a runner with any takes no other task). A
// request the supervisor cannot read is logged and ignored. The verbs
// below are the only spelling of the protocol: the supervisor's handle
// (den/runner/supervisor) reads them, through ReadRequests, and the
// worker's link (den/runner/worker/link.go) writes them.
//
// Besides the control channel, the worker inherits the node's task
// channel (EnvTasksFD) and, when the node relays MongoDB connections, the
// relay's control channel (EnvRelayFD), as the next descriptors; the
// supervisor keeps no copy of either, and all are close-on-exec in the
// worker.
const (
	VerbBegin   = "begin"
	VerbRun     = "run"     // the answer to begin: the run's token
	VerbRefused = "refused" // the answer to begin: no run, and why
	VerbGrace   = "grace"
	VerbMemory  = "memory"
	VerbProcs   = "procs"
	VerbUsage   = "usage"
	VerbStop    = "stop"
	VerbStopped = "stopped" // the answer to stop
	VerbIdle    = "idle"
	// NoPids is the argument of the answer to procs when the run has no
	// pids cgroup.
	NoPids = "-"
)

// Request is the line, without its newline, of a request: verb, and its
// argument if any.
func Request(verb, arg string) string {
	if arg == "" {
		return verb
	}
	return verb + " " + arg
}

// Environment of the worker: the process is the worker when EnvWorker is
// set (taskrunner.Process decides by it), else the supervisor.
const (
	EnvWorker     = "DEN_RUNNER_WORKER"     // "1" in the worker
	EnvSupervisor = "DEN_RUNNER_SUPERVISOR" // the supervisor's pid and start time, "pid:ms"
	ControlFD     = 3
)

// Measured is the supervisor's answer to usage (VerbUsage), as JSON.
type Measured struct {
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
	// for passing their memory request (supervisor/memory.go); OOMKills
	// counts the kernel's OOM kills in the run's cgroup.
	MemoryKill *MemoryKill `json:"memory_kill,omitempty"`
	OOMKills   int64       `json:"oom_kills,omitempty"`
	// PeakTaskRSS is the largest sampled RSS of the task's processes (the
	// tree but the worker), in bytes.
	PeakTaskRSS int64 `json:"peak_task_rss,omitempty"`
}

// MemoryKill is what the supervisor saw when it stopped a run for its
// memory.
type MemoryKill struct {
	RSS   int64 `json:"rss"`   // bytes the task's processes held
	Limit int64 `json:"limit"` // bytes the task requested
	Procs int   `json:"procs"` // processes killed
}

// ReadRequests is the supervisor's reader of the control channel f: it
// sends the worker's requests to out, one batch per read, so that those
// the worker sent together (link.askAll) are handled together. It closes
// out when f is closed.
func ReadRequests(f *os.File, out chan<- []string) {
	defer close(out)
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		batch := []string{strings.TrimSuffix(line, "\n")}
		// Whole lines the same read brought.
		for {
			b, _ := r.Peek(r.Buffered())
			if bytes.IndexByte(b, '\n') < 0 {
				break
			}
			line, _ := r.ReadString('\n')
			batch = append(batch, strings.TrimSuffix(line, "\n"))
		}
		out <- batch
	}
}
