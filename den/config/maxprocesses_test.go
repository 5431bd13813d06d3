package config

import (
	"strings"
	"testing"
)

// runner.max_processes: default 1024, a value, and bad values named in the
// error.
func TestRunnerMaxProcesses(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int
		err  string
	}{
		{"node: n\n", 1024, ""},
		{"runner:\n  max_processes: 64\n", 64, ""},
		{"runner:\n  max_processes: 0\n", 0, "runner.max_processes: 0 is below the minimum 1"},
		{"runner:\n  max_processes: lots\n", 0, "runner.max_processes lots is not a whole number"},
		{"runner:\n  max_processes: 100000000\n", 0, "runner.max_processes: 100000000 is above the maximum 4194304"},
	} {
		c, err := Load(write(t, "den.yaml", tc.file), nil)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.file, err)
		case tc.err == "" && c.Runner.MaxProcesses != tc.want:
			t.Errorf("%q: runner.max_processes %d, want %d", tc.file, c.Runner.MaxProcesses, tc.want)
		}
	}
}
