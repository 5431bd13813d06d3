package den_test

import (
	"cmp"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/den-project/den/den"
	"github.com/den-project/den/queue"
)

// Every interval the docs name is the one the code has: each phrase below
// is found in its file, as often as it is there, and says the constant's
// value. (The README once said rescues ran every 10 s, and the code every
// 30 s.)
func TestDocsNameTheCodesIntervals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, pattern string // pattern's first group is a number of units
		want          time.Duration
		unit          time.Duration // zero: seconds
	}{
		{"../docs/performance.md", "every (\\d+) s \\(`RefreshEvery`\\)", den.DefaultRefreshEvery, 0},
		{"../docs/performance.md", "every (\\d+) s \\(`ProbeEvery`\\)", den.DefaultProbeEvery, 0},
		{"../docs/performance.md", `every (\d+) s the sweeps`, den.DefaultSweepEvery, 0},
		{"../docs/performance.md", `every (\d+) s the rescues`, den.DefaultRescueEvery, 0},
		{"../docs/performance.md", "every (\\d+) s \\(`RetentionEvery`\\)", den.DefaultRetentionEvery, 0},
		{"../docs/performance.md", `A pass \(every .interval., (\d+) s by default\)`, den.DefaultInterval, 0},
		{"../docs/task-control.md", `sweep \(every (\d+) s\)`, den.DefaultSweepEvery, 0},
		{"../docs/task-control.md", `At start, and every (\d+) s, a node checks its own running tasks`, den.DefaultRescueEvery, 0},
		{"../docs/task-control.md", `dead-node check \(every (\d+) s`, den.DefaultRescueEvery, 0},
		{"../docs/documents.md", `running\s+tasks are counted every (\d+) s`, den.DefaultRefreshEvery, 0},
		{"../docs/documents.md", `only when an entry changed \(and every (\d+) s\)`, den.DefaultRefreshEvery, 0},
		{"../docs/task-control.md", "`dead_node_after` \\(default (\\d+) minutes?\\)", queue.DefaultDeadNodeAfter, time.Minute},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile(tc.pattern).FindAllStringSubmatch(string(b), -1)
		if len(found) == 0 {
			t.Errorf("%s no longer says %q: update this test with what it says now", tc.file, tc.pattern)
		}
		unit := cmp.Or(tc.unit, time.Second)
		for _, m := range found {
			if want := strconv.Itoa(int(tc.want / unit)); m[1] != want {
				t.Errorf("%s: %q says %s, the code has %s", tc.file, m[0], m[1], tc.want)
			}
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`every half minute it reaps orphaned tasks`).Match(readme) || den.DefaultRescueEvery != 30*time.Second {
		t.Errorf("the README says orphans are reaped every half minute; the code rescues every %s", den.DefaultRescueEvery)
	}
}
