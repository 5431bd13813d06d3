package contain

import (
	"context"
	"strings"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/den-project/den/plugins"
)

// EnvRun is the variable that marks every process of a run; plugins that
// start programs keep it (see plugins.EnvRun).
const EnvRun = plugins.EnvRun

// Marker is the value of EnvRun for one run of a task: the task id and the
// run's token, both hex.
func Marker(taskID, token string) string { return taskID + "." + token }

// Marked lists the live processes whose environment carries EnvRun=marker and
// that started no earlier than notBefore (milliseconds since the epoch; 0
// means any time), except the calling process. Processes whose environment
// cannot be read (other users') are not found: tasks run as the node's user.
func Marked(ctx context.Context, marker string, notBefore int64) []int32 {
	want := EnvRun + "=" + marker
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil
	}
	var out []int32
	for _, p := range procs {
		if p.Pid == self || zombie(ctx, p) {
			continue
		}
		if notBefore > 0 {
			// Start times are in milliseconds but /proc gives clock ticks:
			// allow a second of rounding.
			if created, err := p.CreateTimeWithContext(ctx); err != nil || created < notBefore-1000 {
				continue
			}
		}
		env, err := p.EnvironWithContext(ctx)
		if err != nil {
			continue
		}
		for _, e := range env {
			if e == want {
				out = append(out, p.Pid)
				break
			}
			if strings.HasPrefix(e, EnvRun+"=") {
				break // environ may hold a name twice; the first one wins for getenv
			}
		}
	}
	return out
}

func zombie(ctx context.Context, p *process.Process) bool {
	st, err := p.StatusWithContext(ctx)
	return err != nil || (len(st) > 0 && st[0] == process.Zombie)
}
