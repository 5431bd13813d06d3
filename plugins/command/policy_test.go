package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	tool := filepath.Join(bin, "tool")
	data := filepath.Join(bin, "data.txt")
	other := filepath.Join(dir, "other")
	link := filepath.Join(bin, "sneaky")
	// Each refusal below must come from the case, not from a fixture that
	// was not made.
	for _, err := range []error{
		os.Mkdir(bin, 0o755),
		os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755),
		os.WriteFile(data, []byte("x"), 0o644),
		os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755),
		os.Symlink(other, link), // a link inside an allowed dir to a file outside it
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	single := Policy{Allow: []string{other}}
	byDir := Policy{Allow: []string{bin + "/"}}
	cases := []struct {
		name    string
		p       Policy
		program string
		want    string // resolved path, or "" for refused
		reason  string
	}{
		{"file in allowed dir", byDir, tool, tool, ""},
		{"bare name found in allowed dir", byDir, "tool", tool, ""},
		{"allowed file", single, other, other, ""},
		{"not allowed", byDir, other, "", "not allowed on this node"},
		{"symlink escaping the allowed dir", byDir, link, "", "not allowed"},
		{"not executable", byDir, data, "", "not an executable"},
		{"relative path", byDir, "bin/tool", "", "absolute path"},
		{"missing", byDir, filepath.Join(bin, "nope"), "", "no such file"},
		{"nothing allowed", Policy{}, tool, "", "not allowed"},
		{"directory itself", byDir, bin, "", "not an executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.p.resolve(tc.program)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("resolve = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "command refused") {
				t.Fatalf("resolve = %q, %v; want refusal %q", got, err, tc.reason)
			}
		})
	}
}

// The node's listed variables are passed on, nothing else of its
// environment is.
func TestEnvironmentPassesOnOnlyListedNodeVariables(t *testing.T) {
	t.Setenv("DEN_TEST_KEEP", "kept")
	t.Setenv("TEST_SECRET", "secret")
	t.Setenv("TEST_KEEP", "kept")
	p := Policy{Env: []string{"TEST_KEEP"}, EnvAllow: []string{"MINE"}}
	env, err := p.environment(map[string]string{"MINE": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(env, " "); got != "TEST_KEEP=kept MINE=1" {
		t.Fatalf("environment %q", got)
	}
}

// A task may set only the variables command.env_allow lists (names, or
// prefixes ending in * or _); never den's own (DEN_*), never one the node
// passes on. With nothing allowed, the variables that turn tar, make or
// openssl into a shell, and the loader's, are refused.
func TestTaskEnvironmentIsAnAllowlist(t *testing.T) {
	none := Policy{Env: []string{"PATH"}}
	some := Policy{Env: []string{"PATH"}, EnvAllow: []string{"LANG", "LC_*", "MYAPP_"}}
	cases := []struct {
		p       Policy
		name    string
		allowed bool
	}{
		{none, "TAR_OPTIONS", false}, {none, "MAKEFLAGS", false}, {none, "MAKEFILES", false},
		{none, "OPENSSL_CONF", false}, {none, "LD_PRELOAD", false}, {none, "LANG", false},
		{some, "LANG", true}, {some, "LC_ALL", true}, {some, "MYAPP_MODE", true},
		{some, "LANGUAGE", false}, {some, "MYAPP", false}, {some, "TAR_OPTIONS", false},
		{some, "MAKEFLAGS", false}, {some, "MAKEFILES", false}, {some, "OPENSSL_CONF", false},
		{some, "LD_PRELOAD", false}, {some, "PATH", false}, {some, "DEN_RUN", false},
		{some, "BASH_FUNC_x%%", false}, {some, "", false},
		{Policy{EnvAllow: []string{"DEN*"}}, "DEN_RUN", false},
	}
	for _, tc := range cases {
		env, err := tc.p.environment(map[string]string{tc.name: "x"})
		if tc.allowed && (err != nil || !strings.Contains(strings.Join(env, " "), tc.name+"=x")) {
			t.Errorf("env_allow %v: %s refused: %v", tc.p.EnvAllow, tc.name, err)
		}
		if !tc.allowed && (err == nil || !strings.Contains(err.Error(), "command refused") || !strings.Contains(err.Error(), tc.name)) {
			t.Errorf("env_allow %v: %s not refused (%v)", tc.p.EnvAllow, tc.name, err)
		}
	}
}

// Wrong types and bad values in the plugin's configuration are errors.
func TestPolicyConfigurationErrors(t *testing.T) {
	for raw, want := range map[string]string{
		`{"enabled": "yes"}`:                                    "cannot unmarshal",
		`{"allow": "/usr/bin/"}`:                                "cannot unmarshal",
		`{"env_allow": [1]}`:                                    "cannot unmarshal",
		`{"enabeld": true}`:                                     "unknown field",
		`{"landlock": "maybe"}`:                                 "must be required or optional",
		`{"env_allow": ["DEN_*"]}`:                              "den's own",
		`{"env_allow": ["D*"]}`:                                 "den's own",
		`{"env_allow": ["*"]}`:                                  "must be a variable name",
		`{"env_allow": ["A-B"]}`:                                "must be a variable name",
		`{"env": ["DEN_TASK_RUNNER_SPEC"]}`:                     "den's own",
		`{"enabled": true}`:                                     "lists no executable",
		`{"enabled": true, "allow": ["usr/bin/"]}`:              "absolute path",
		`{"enabled": true, "allow": ["/usr/bin/"], "env": [1]}`: "cannot unmarshal",
		`{"enabled": true, "allow": ["/usr/bin/"]}`:             "command.user is not set",
		`{"user": "root"}`:                                      "not root",
		`{"user": "0:1000"}`:                                    "root's user or group",
		`{"user": "1000:0"}`:                                    "root's user or group",
		`{"user": "1000:x"}`:                                    "uid:gid (two numbers)",
		`{"user": 1000}`:                                        "cannot unmarshal",
		`{"user_optional": "yes"}`:                              "cannot unmarshal",
		`{"cpu": -1}`:                                           "command.cpu -1 must be 0 (no limit) or 0.01 to 8192 cores",
		`{"cpu": 0.001}`:                                        "command.cpu 0.001 must be 0",
		`{"cpu": 8193}`:                                         "command.cpu 8193 must be 0",
		`{"cpu": "1"}`:                                          "cannot unmarshal",
	} {
		if _, err := ParsePolicy([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", raw, err, want)
		}
	}
	p, err := ParsePolicy([]byte(`{"enabled": true, "allow": ["/usr/bin/"], "env_allow": ["LANG", "LC_*", "MYAPP_", "DENTIST"], "landlock": "optional", "user": "nobody", "cpu": 1.5}`))
	if err != nil || !p.Enabled || p.Landlock != LandlockOptional || p.User != "nobody" || p.CPU != 1.5 {
		t.Fatalf("valid policy: %+v, %v", p, err)
	}
}

// Without Landlock the plugin runs only when the configuration says
// landlock: optional; with Landlock it always enforces it.
func TestLandlockMissingRefusesThePluginUnlessOptional(t *testing.T) {
	for _, tc := range []struct {
		landlock string
		abi      int
		enforce  bool
		refused  bool
	}{
		{"", 0, false, true},
		{LandlockRequired, 0, false, true},
		{LandlockOptional, 0, false, false},
		{"", 1, true, false},
		{LandlockRequired, 7, true, false},
		{LandlockOptional, 7, true, false},
	} {
		p := Policy{Enabled: true, UserOptional: true, Allow: []string{"/usr/bin/true"}, Landlock: tc.landlock}
		e, err := p.Boundary(Machine{LandlockABI: tc.abi})
		if enforce := e.Landlock; enforce != tc.enforce || (err != nil) != tc.refused {
			t.Errorf("landlock %q, ABI %d: enforce %v, err %v", tc.landlock, tc.abi, enforce, err)
		}
		if tc.refused && !strings.Contains(err.Error(), "command.landlock is optional") {
			t.Errorf("refusal does not say how to proceed: %v", err)
		}
	}
}

// At start the node says what holds: an error when the plugin stays off
// for want of Landlock, a warning naming what is not enforced when it runs
// without it, nothing alarming when Landlock enforces the boundary.
func TestLogBoundarySaysWhatIsNotEnforced(t *testing.T) {
	for _, tc := range []struct {
		landlock   string
		abi        int
		sharedPIDs bool
		level      zapcore.Level
		has        string
	}{
		{LandlockRequired, 0, false, zapcore.ErrorLevel, "NOT enabled"},
		{LandlockOptional, 0, false, zapcore.WarnLevel, "can execute anything on this machine"},
		{LandlockRequired, 7, false, zapcore.InfoLevel, "Landlock enforces"},
		{LandlockRequired, 7, true, zapcore.WarnLevel, "IN THE NODE'S PID NAMESPACE (command.shared_pids: true)"},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		Policy{Enabled: true, User: "nobody", Allow: []string{"/usr/bin/true"}, Landlock: tc.landlock, SharedPIDs: tc.sharedPIDs}.LogBoundary(zap.New(core), Machine{LandlockABI: tc.abi, SetUser: true, Namespaces: true})
		all := logs.All()
		if len(all) != 1 || all[0].Level != tc.level || !strings.Contains(all[0].Message, tc.has) {
			t.Errorf("landlock %s, ABI %d: logged %v", tc.landlock, tc.abi, all)
		}
	}
}

// The node's start line says what bounds a task's CPU: its cpu cgroup's
// quota, or, where there is none, nothing (SCHED_IDLE), in capitals.
func TestLogBoundarySaysWhatBoundsCPU(t *testing.T) {
	for _, tc := range []struct {
		cpu     float64
		cgroups bool
		has     string
	}{
		{1.5, true, "1.5 cores per task, in a cgroup v1 cpu cgroup of its own"},
		{1, false, "NOT bounded (command.cpu: 1, but no cpu cgroup for tasks here): tasks run under SCHED_IDLE"},
		{0, true, "no limit (command.cpu: 0)"},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		Policy{Enabled: true, User: "nobody", Allow: []string{"/usr/bin/true"}, CPU: tc.cpu}.LogBoundary(zap.New(core), Machine{LandlockABI: 7, SetUser: true, Namespaces: true, CPUCgroups: tc.cgroups})
		all := logs.All()
		if len(all) != 1 || !strings.Contains(fmt.Sprint(all[0].ContextMap()["task_cpu"]), tc.has) {
			t.Errorf("cpu %g, cgroups %v: logged %v, want task_cpu saying %q", tc.cpu, tc.cgroups, all, tc.has)
		}
	}
}

// A restricted network needs Landlock's TCP rules (ABI 4), or for none a
// network namespace; without either the plugin stays off, whatever
// command.landlock says.
func TestRestrictedNetworkNeedsItsMechanism(t *testing.T) {
	for _, tc := range []struct {
		network Network
		m       Machine
		refused bool
	}{
		{Network{None: true}, Machine{LandlockABI: 3, SetUser: true}, true},
		{Network{None: true}, Machine{LandlockABI: 3, SetUser: true, Namespaces: true}, false},
		{Network{None: true}, Machine{LandlockABI: 0, SetUser: true, Namespaces: true}, false},
		{Network{Ports: []uint16{443}}, Machine{LandlockABI: 3, SetUser: true, Namespaces: true}, true},
		{Network{Ports: []uint16{443}}, Machine{LandlockABI: 4, SetUser: true}, false},
		{Network{}, Machine{LandlockABI: 0, SetUser: true}, false},
	} {
		p := Policy{Enabled: true, Allow: []string{"/usr/bin/true"}, User: "nobody", Landlock: LandlockOptional, Network: tc.network}
		_, err := p.Boundary(tc.m)
		if (err != nil) != tc.refused {
			t.Errorf("network %s on %+v: error %v, want refused %v", tc.network, tc.m, err, tc.refused)
		}
	}
	for raw, want := range map[string]string{
		`{"network": "some"}`:   "must be all, none or a list",
		`{"network": [0]}`:      "not a TCP port",
		`{"network": [65536]}`:  "not a TCP port",
		`{"network": {"a": 1}}`: "must be all, none or a list",
	} {
		if _, err := ParsePolicy([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", raw, err, want)
		}
	}
	for raw, want := range map[string]string{`{"network": "none"}`: "none", `{"network": "all"}`: "all", `{}`: "all", `{"network": [443, 27017]}`: "[443, 27017]"} {
		p, err := ParsePolicy([]byte(raw))
		if err != nil || p.Network.String() != want {
			t.Errorf("%s: network %s, error %v, want %s", raw, p.Network, err, want)
		}
	}
}
