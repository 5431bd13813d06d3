package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	tool := filepath.Join(bin, "tool")
	os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755)
	data := filepath.Join(bin, "data.txt")
	os.WriteFile(data, []byte("x"), 0o644)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755)
	link := filepath.Join(bin, "sneaky")
	os.Symlink(other, link) // a link inside an allowed dir to a file outside it
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

func TestEnvironment(t *testing.T) {
	t.Setenv("DEN_TEST_KEEP", "kept")
	t.Setenv("DEN_TEST_SECRET", "secret")
	p := Policy{Env: []string{"DEN_TEST_KEEP"}}
	env, err := p.environment(map[string]string{"MINE": "1"})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(env, " ")
	if !strings.Contains(joined, "DEN_TEST_KEEP=kept") || !strings.Contains(joined, "MINE=1") || strings.Contains(joined, "SECRET") {
		t.Fatalf("environment %v", env)
	}
	for _, bad := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "BASH_FUNC_x%%"} {
		if _, err := p.environment(map[string]string{bad: "x"}); err == nil {
			t.Errorf("task may set %s", bad)
		}
	}
}

func TestInterpretersNeedExplicitPermission(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/bin/python3.11": true, "/usr/bin/perl": true, "/bin/dash": true, "/usr/bin/env": true,
		"/usr/bin/envsubst": false, "/usr/bin/shred": false, "/usr/bin/head": false, "/usr/bin/rsync": false,
	} {
		if got := interpreter(path); got != want {
			t.Errorf("interpreter(%s) = %v", path, got)
		}
	}
	p := Policy{Env: []string{"PATH", "LANG"}}
	if _, err := p.environment(map[string]string{"LANG": "x"}); err == nil {
		t.Error("a task overrode a variable the node passes on")
	}
	for _, bad := range []string{"PATH", "GIT_SSH_COMMAND", "PYTHONPATH", "PERL5LIB", "JAVA_TOOL_OPTIONS", "NODE_OPTIONS"} {
		if _, err := p.environment(map[string]string{bad: "x"}); err == nil {
			t.Errorf("task may set %s", bad)
		}
	}
}
