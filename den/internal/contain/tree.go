package contain

import (
	"context"
	"os"

	"github.com/shirou/gopsutil/v4/process"
)

var self = int32(os.Getpid())

// Descendants lists the live (not zombie) descendants of root, except the
// processes in skip and their own descendants.
func Descendants(ctx context.Context, root int32, skip ...int32) []int32 {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil
	}
	children := map[int32][]*process.Process{}
	for _, p := range procs {
		ppid, err := p.PpidWithContext(ctx)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	skipped := map[int32]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	var out []int32
	stack := []int32{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[pid] {
			if skipped[c.Pid] {
				continue
			}
			stack = append(stack, c.Pid)
			if !zombie(ctx, c) {
				out = append(out, c.Pid)
			}
		}
	}
	return out
}
