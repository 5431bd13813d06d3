package supervisor

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/den-project/den/den/internal/contain"
	"github.com/den-project/den/den/internal/testdeadline"
)

// spinTicks is a shell loop that uses 30 clock ticks (0.3 s) of CPU of its
// own, read from /proc, whatever the machine's load.
const spinTicks = `while [ $(cut -d" " -f14 /proc/$$/stat) -lt 30 ]; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; done`

// A baseline taken while a process of the tree has exited and waits to be
// reaped counts that process's CPU: reaped, it goes into its parent's
// (here this test process's RUSAGE_CHILDREN), and must not show up again
// as CPU used since the baseline. A runner's next run was charged the CPU
// of such a process of the run before. This test process plays the
// supervisor; its child, the spin, is a zombie until Wait.
func TestBaselineCountsAZombiesCPU(t *testing.T) {
	spin := exec.Command("sh", "-c", spinTicks)
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	pid := int32(spin.Process.Pid)
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			spin.Process.Kill()
			spin.Wait()
		}
	})
	testdeadline.Wait(t, 20*time.Millisecond, "the spin to end", func() bool {
		st, ok := contain.ReadStat(pid)
		if !ok {
			t.Fatalf("the spin (pid %d) is gone before it was reaped", pid)
		}
		return st.State == 'Z'
	})
	st, _ := contain.ReadStat(pid)
	used := float64(st.UTime+st.STime+st.CUTime+st.CSTime) / clockTicks

	s := &sampler{me: int32(os.Getpid()), tree: contain.NewTree()}
	base := s.cpu(context.Background())
	if err := spin.Wait(); err != nil {
		t.Fatalf("the spin failed: %v", err)
	}
	reaped = true
	after := s.cpu(context.Background())
	grew := (after.user + after.system) - (base.user + base.system)
	// This process's own CPU is not in the sum: what grows is what it
	// reaped since the baseline.
	if grew > used/2 {
		t.Fatalf("reaping the zombie taken into the baseline (%d, %.2f s of CPU) added %.2f s: the baseline missed it", pid, used, grew)
	}
	t.Logf("the zombie used %.2f s; reaping it added %.2f s", used, grew)
}

// A reading of the tree is taken only when no process of it was reaped or
// moved while it was read: every listed process was read, and the tree,
// listed again after the reads, is the same. Else it is read again; a
// tree that never holds still is read cpuTries times.
func TestSteadyReadingReadsAgainWhenTheTreeChanged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lists [][]int32 // what each listing of the tree gives, the last one repeated
		gone  []int32   // processes whose stat cannot be read (reaped after the listing)
		reads int
		took  []int32 // the processes of the reading taken
	}{
		{"still", [][]int32{{1, 2, 3}}, nil, 1, []int32{1, 2, 3}},
		{"same processes in another order", [][]int32{{1, 2, 3}, {3, 1, 2}}, nil, 1, []int32{1, 2, 3}},
		{"a child reaped before its read", [][]int32{{1, 2, 3}, {1, 2}}, []int32{3}, 2, []int32{1, 2}},
		{"a child reaped after its read", [][]int32{{1, 2, 3}, {1, 2}}, nil, 2, []int32{1, 2}},
		{"a process moved into the tree during the walk", [][]int32{{1, 2}, {1, 2, 3}}, nil, 2, []int32{1, 2, 3}},
		{"never still", nil, nil, cpuTries, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listed := 0
			list := func() []int32 {
				defer func() { listed++ }()
				if tc.lists == nil {
					return []int32{int32(listed)} // another tree each time
				}
				return tc.lists[min(listed, len(tc.lists)-1)]
			}
			var reads [][]int32
			read := func(pids []int32) reading {
				reads = append(reads, pids)
				r := reading{whole: true}
				for _, p := range pids {
					if slices.Contains(tc.gone, p) && len(reads) == 1 {
						r.whole = false
					}
				}
				return r
			}
			steadyReading(context.Background(), list, read)
			if len(reads) != tc.reads {
				t.Fatalf("read the tree %d times (%v), want %d", len(reads), reads, tc.reads)
			}
			if tc.took != nil && !sameProcs(reads[len(reads)-1], tc.took) {
				t.Errorf("took the reading of %v, want %v", reads[len(reads)-1], tc.took)
			}
		})
	}
}
