package command

import (
	"slices"
	"strings"
	"testing"

	"github.com/den-project/den/den/sandbox"
)

// Run's decisions, as pure functions: the program a task asks for, its
// directories, its memory and CPU limits and what it may reach.
func TestRunDecisions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		p       params
		shell   bool
		argv    []string
		refused string
	}{
		{"command", params{Command: []string{"/bin/echo", "hi"}}, false, []string{"/bin/echo", "hi"}, ""},
		{"shell allowed", params{Shell: "echo hi"}, true, []string{Shell, "-c", "echo hi"}, ""},
		{"shell not allowed", params{Shell: "echo hi"}, false, nil, "command.shell"},
		{"both", params{Shell: "echo hi", Command: []string{"/bin/true"}}, true, nil, "not both"},
		{"neither", params{}, true, nil, "no command parameter"},
	} {
		argv, err := argvOf(c.p, c.shell)
		switch {
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: argvOf error %v, want one that says %q", c.name, err, c.refused)
		case c.refused == "" && (err != nil || !slices.Equal(argv, c.argv)):
			t.Errorf("%s: argvOf = %q, %v; want %q", c.name, argv, err, c.argv)
		}
	}

	for _, c := range []struct {
		name         string
		named        string
		private      bool
		taskTmp, dir string
	}{
		{"shared tmp", "", false, "/tmp/den-1", "/tmp/den-1"},
		{"private tmp", "", true, sandbox.TaskTmp, sandbox.TaskTmp},
		{"a directory of its own", "/srv", true, sandbox.TaskTmp, "/srv"},
	} {
		taskTmp, dir := taskDirs("/tmp/den-1", c.named, c.private)
		if taskTmp != c.taskTmp || dir != c.dir {
			t.Errorf("%s: taskDirs = %q, %q; want %q, %q", c.name, taskTmp, dir, c.taskTmp, c.dir)
		}
	}

	for _, c := range []struct{ policyMB, request, want int64 }{
		{0, 5 << 20, 0},
		{100, 0, 100 << 20},
		{100, 50 << 20, 100 << 20},
		{100, 200 << 20, 200 << 20},
	} {
		if got := memoryLimit(c.policyMB, c.request); got != c.want {
			t.Errorf("memoryLimit(%d MiB, %d) = %d, want %d", c.policyMB, c.request, got, c.want)
		}
	}

	for _, c := range []struct{ policy, request, want float64 }{
		{0, 2, 0},
		{1, 0, 1},
		{1.5, 0.5, 1.5},
		{1, 2.5, 2.5},
		{1, 1e9, MaxCPU},
	} {
		if got := cpuLimit(c.policy, c.request); got != c.want {
			t.Errorf("cpuLimit(%g, %g) = %g, want %g", c.policy, c.request, got, c.want)
		}
	}

	for _, c := range []struct {
		name       string
		n          Network
		namespaces bool
		mode       string
		none       bool
		ports      []uint16
	}{
		{"all", Network{}, true, "", false, nil},
		{"none with namespaces", Network{None: true}, true, sandbox.NetworkNone, true, nil},
		{"none without", Network{None: true}, false, sandbox.NetworkNone, false, nil},
		{"ports", Network{Ports: []uint16{443}}, true, sandbox.NetworkPorts, false, []uint16{443}},
	} {
		mode, none, ports := networkOf(c.n, c.namespaces)
		if mode != c.mode || none != c.none || !slices.Equal(ports, c.ports) {
			t.Errorf("%s: networkOf = %q, %v, %v; want %q, %v, %v", c.name, mode, none, ports, c.mode, c.none, c.ports)
		}
	}
}
