package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// Policy is the node's configuration of the plugin.
type Policy struct {
	Enabled bool     `json:"enabled"`
	Allow   []string `json:"allow"`
	Shell   bool     `json:"shell"`
	// Env names the variables passed on from the node's environment.
	Env []string `json:"env"`
	// EnvAllow lists the variables a task may set: names, or prefixes
	// written with a trailing * or _ (LC_*, MYAPP_).
	EnvAllow []string `json:"env_allow"`
	// Landlock is LandlockRequired (the default, also when empty) or
	// LandlockOptional.
	Landlock string `json:"landlock"`
}

// Values of Policy.Landlock.
const (
	LandlockRequired = "required"
	LandlockOptional = "optional"
)

// denPrefix is the prefix of den's own variables (the run marker, the
// runner's spec with the database URI): never set by a task, never passed
// on from the node.
const denPrefix = "DEN_"

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParsePolicy reads the plugin's configuration section; none means off.
// Unknown keys and wrong types are errors.
func ParsePolicy(raw json.RawMessage) (Policy, error) {
	var p Policy
	if len(raw) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("command plugin configuration: %w", err)
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// Validate checks the policy's values.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("command plugin configuration: "+format, args...)
	}
	if p.Enabled && len(p.Allow) == 0 {
		return bad("command.enabled is true but command.allow lists no executable or directory")
	}
	for _, a := range p.Allow {
		if !filepath.IsAbs(a) {
			return bad("command.allow entry %q must be an absolute path", a)
		}
	}
	for _, name := range p.Env {
		if !envName.MatchString(name) {
			return bad("command.env entry %q is not a variable name", name)
		}
		if strings.HasPrefix(name, denPrefix) {
			return bad("command.env entry %q: variables named %s* are den's own and are never passed to programs", name, denPrefix)
		}
	}
	for _, e := range p.EnvAllow {
		name, star := strings.CutSuffix(e, "*")
		if !envName.MatchString(name) {
			return bad("command.env_allow entry %q must be a variable name, or a prefix ending in * or _ (LC_*, MYAPP_)", e)
		}
		prefix := star || strings.HasSuffix(name, "_")
		if strings.HasPrefix(name, denPrefix) || (prefix && strings.HasPrefix(denPrefix, name)) {
			return bad("command.env_allow entry %q would let tasks set den's own variables (%s*)", e, denPrefix)
		}
	}
	switch p.Landlock {
	case "", LandlockRequired, LandlockOptional:
	default:
		return bad("command.landlock %q must be %s or %s", p.Landlock, LandlockRequired, LandlockOptional)
	}
	return nil
}

// Boundary decides, for a machine whose kernel offers Landlock ABI abi (0:
// none), whether the plugin may run and whether Landlock enforces its
// execute boundary. Without Landlock the plugin may run only when the
// policy says landlock: optional; the error says why not.
func (p Policy) Boundary(abi int) (landlock bool, err error) {
	if abi >= 1 {
		return true, nil
	}
	if p.Landlock == LandlockOptional {
		return false, nil
	}
	return false, errors.New("command refused: this kernel has no Landlock (not built in, or not in the lsm= boot list), so the execute boundary cannot be enforced; the plugin stays off unless command.landlock is optional")
}

// Unenforced describes what does not hold when the plugin runs without
// Landlock, for the node's log.
const Unenforced = "programs started by an allowed program (find -exec, make, sed e, env, xargs, tar, git, ...) can execute anything on this machine, not only command.allow; only the task's own program is checked, and no_new_privs still holds"

// LogBoundary logs, once at start, what the node's command plugin enforces
// on this machine: an error when it stays off for want of Landlock, a
// warning when it runs without it.
func (p Policy) LogBoundary(log *zap.Logger, abi int) {
	if !p.Enabled {
		return
	}
	landlock, err := p.Boundary(abi)
	switch {
	case err != nil:
		log.Error("command plugin NOT enabled: the kernel has no Landlock and command.landlock is not optional", zap.String("plugin", Name), zap.Error(err))
	case !landlock:
		log.Warn("command plugin runs WITHOUT its kernel boundary (command.landlock: optional, and this kernel has no Landlock): "+Unenforced, zap.String("plugin", Name))
	default:
		log.Info("command plugin enabled; Landlock enforces its execute boundary", zap.String("plugin", Name), zap.Int("landlock_abi", abi), zap.Strings("allow", p.Allow))
	}
}

// Shell is the shell that runs a task's shell parameter.
const Shell = "/bin/sh"

// resolve returns the real path of an executable the policy allows, or an
// error saying why it is refused. A bare name is looked up in the allowed
// directories, in order. This gives a clear reason for the task's own
// program; the kernel's boundary (Landlock) is what holds for everything
// the program starts.
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

// taskMaySet reports whether a task may set variable name: only those
// env_allow lists, never den's own, never one the node passes on.
func (p Policy) taskMaySet(name string) bool {
	if !envName.MatchString(name) || strings.HasPrefix(name, denPrefix) || slices.Contains(p.Env, name) {
		return false
	}
	for _, e := range p.EnvAllow {
		if prefix, ok := strings.CutSuffix(e, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if strings.HasSuffix(e, "_") {
			if strings.HasPrefix(name, e) {
				return true
			}
		} else if e == name {
			return true
		}
	}
	return false
}

// environment builds the program's environment: the listed variables from
// the runner's own environment, then the task's, each of which must be
// allowed.
func (p Policy) environment(task map[string]string) ([]string, error) {
	var env []string
	for _, name := range p.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	var refused []string
	for name, v := range task {
		if !p.taskMaySet(name) {
			refused = append(refused, fmt.Sprintf("%q", name))
			continue
		}
		env = append(env, name+"="+v)
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		allowed := "none"
		if len(p.EnvAllow) > 0 {
			allowed = strings.Join(p.EnvAllow, ", ")
		}
		return nil, fmt.Errorf("command refused: the task sets environment variables this node does not let tasks set: %s (command.env_allow: %s; %s* and the variables in command.env never)", strings.Join(refused, ", "), allowed, denPrefix)
	}
	slices.Sort(env[len(env)-len(task):])
	return env, nil
}
