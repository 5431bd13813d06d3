package command

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Policy is the node's configuration of the plugin.
type Policy struct {
	Enabled bool     `json:"enabled"`
	Allow   []string `json:"allow"`
	Shell   bool     `json:"shell"`
	Env     []string `json:"env"`
}

// ParsePolicy reads the plugin's configuration section; none means off.
func ParsePolicy(raw json.RawMessage) (Policy, error) {
	var p Policy
	if len(raw) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("command plugin configuration: %w", err)
	}
	return p, nil
}

// Shell is the shell that runs a task's shell parameter.
const Shell = "/bin/sh"

// resolve returns the real path of an executable the policy allows, or an
// error saying why it is refused. A bare name is looked up in the allowed
// directories, in order.
func (p Policy) resolve(program string) (string, error) {
	if program == "" {
		return "", fmt.Errorf("command refused: no program given")
	}
	candidates := []string{program}
	if !strings.ContainsRune(program, '/') {
		candidates = nil
		for _, a := range p.Allow {
			if st, err := os.Stat(a); err == nil && st.IsDir() {
				candidates = append(candidates, filepath.Join(a, program))
			}
		}
		if len(candidates) == 0 {
			return "", fmt.Errorf("command refused: %q is not an absolute path and no allowed directory holds it", program)
		}
	} else if !filepath.IsAbs(program) {
		return "", fmt.Errorf("command refused: %q must be an absolute path", program)
	}
	var lastErr error
	for _, c := range candidates {
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			lastErr = fmt.Errorf("command refused: %s: %w", c, err)
			continue
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			lastErr = fmt.Errorf("command refused: %s is not an executable file", c)
			continue
		}
		if p.allows(real) {
			return real, nil
		}
		lastErr = fmt.Errorf("command refused: %s is not allowed on this node (command.allow: %s)", c, strings.Join(p.Allow, ", "))
	}
	return "", lastErr
}

// allows reports whether a resolved path is an allowed file or lies under
// an allowed directory.
func (p Policy) allows(real string) bool {
	for _, a := range p.Allow {
		ra, err := filepath.EvalSymlinks(a)
		if err != nil {
			continue
		}
		st, err := os.Stat(ra)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			if ra == real {
				return true
			}
			continue
		}
		if rel, err := filepath.Rel(ra, real); err == nil && !strings.HasPrefix(rel, "..") && rel != "." {
			return true
		}
	}
	return false
}

// unsafeEnv reports whether a task may not set an environment variable:
// those that make a program load or run other code, or find other
// programs.
func unsafeEnv(name string) bool {
	switch name {
	case "PATH", "BASH_ENV", "ENV", "IFS", "PS4", "SHELLOPTS", "BASHOPTS", "GCONV_PATH", "LOCPATH",
		"HOSTALIASES", "GLIBC_TUNABLES", "MALLOC_CHECK_", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
		"JDK_JAVA_OPTIONS", "CLASSPATH", "TMPDIR", "HOME", "EDITOR", "VISUAL", "PAGER", "SSH_ASKPASS":
		return true
	}
	for _, prefix := range []string{"LD_", "BASH_FUNC_", "GIT_", "PYTHON", "PERL", "RUBY", "NODE_", "LUA_", "PHP", "DYLD_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return name == "" || strings.ContainsAny(name, "=\x00")
}

// interpreters are programs that run code given to them: allowing one by a
// directory allows anything.
var interpreters = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "env",
	"python", "perl", "ruby", "node", "nodejs", "php", "lua", "tclsh", "wish", "awk", "gawk", "mawk", "nawk", "expect", "xargs", "sudo", "su", "nice", "nohup", "timeout", "setsid", "strace", "gdb"}

func interpreter(path string) bool {
	base := filepath.Base(path)
	for _, name := range interpreters {
		if base == name || (strings.HasPrefix(base, name) && strings.Trim(base[len(name):], "0123456789.") == "") {
			return true
		}
	}
	return false
}

// listed reports whether a resolved path is allowed as a file of its own
// (not just through a directory).
func (p Policy) listed(real string) bool {
	for _, a := range p.Allow {
		if ra, err := filepath.EvalSymlinks(a); err == nil && ra == real {
			return true
		}
	}
	return false
}

// environment builds the program's environment: the listed variables from
// the runner's own environment, then the task's.
func (p Policy) environment(task map[string]string) ([]string, error) {
	var env []string
	for _, name := range p.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for name, v := range task {
		if unsafeEnv(name) || slices.Contains(p.Env, name) {
			return nil, fmt.Errorf("command refused: a task may not set the environment variable %q", name)
		}
		env = append(env, name+"="+v)
	}
	return env, nil
}
